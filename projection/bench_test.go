package projection_test

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkDecode decodes the same Pod (~3 KB of protobuf, ~4 KB of JSON)
// side by side: the full corev1.Pod and the PodView projection, from
// protobuf and from JSON (and, for comparison, encoding/json straight into
// PodView). B/op is close to the bytes each result keeps.
func BenchmarkDecode(b *testing.B) {
	pod := testPod(42, false)
	raw := marshal(b, pod)
	js, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	plan := mustPlan[*PodView, *corev1.Pod](b)
	b.Run("protobuf/full", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			var p corev1.Pod
			if err := p.Unmarshal(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf/projection", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := plan.Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/full", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			var p corev1.Pod
			if err := json.Unmarshal(js, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/encoding-json-into-projection", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			var v PodView
			if err := json.Unmarshal(js, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/projection", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := plan.DecodeJSON(js); err != nil {
				b.Fatal(err)
			}
		}
	})
}
