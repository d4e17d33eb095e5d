package projection_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ctrlkit/ctrlkit/projection"
	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// FuzzDecode feeds arbitrary bytes, seeded with real Pods, to three plans
// (Decode, DecodeList, DecodeEnvelope): none may panic, and the full type as its own projection must agree with
// corev1.Pod.Unmarshal whenever both succeed.
func FuzzDecode(f *testing.F) {
	for _, pod := range []*corev1.Pod{testPod(1, false), testPod(2, true), {}} {
		raw := marshal(f, pod)
		f.Add(raw)
		f.Add(raw[:len(raw)/2])
	}
	f.Add(append([]byte("k8s\x00\x12\x03"), 0x0a, 0x01, 'x'))
	f.Add([]byte{0x78, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	view := mustPlan[*PodView, *corev1.Pod](f)
	wide := mustPlan[*wideView, *corev1.Pod](f)
	full := mustPlan[*corev1.Pod, *corev1.Pod](f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if v, err := view.Decode(data); (v == nil) != (err != nil) {
			t.Fatalf("PodView: %v with error %v", v, err)
		}
		if v, err := wide.Decode(data); (v == nil) != (err != nil) {
			t.Fatalf("wideView: %v with error %v", v, err)
		}
		if l, err := view.DecodeList(data); err == nil && len(l.Items) > 0 && l.Items[len(l.Items)-1] == nil {
			t.Fatal("DecodeList returned a nil item")
		}
		if _, err := projection.Unwrap(data); err == nil {
			if v, err := view.DecodeEnvelope(data); (v == nil) != (err != nil) {
				t.Fatalf("DecodeEnvelope: %v with error %v", v, err)
			}
		}
		got, err := full.Decode(data)
		var want corev1.Pod
		if err != nil || want.Unmarshal(data) != nil {
			return
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("Decode differs from corev1.Pod.Unmarshal:\n got %v\nwant %v", got, &want)
		}
	})
}

// FuzzDecodeJSON feeds arbitrary JSON, seeded with real Pods, to DecodeJSON:
// it must not panic, and whenever encoding/json decodes the input into the
// projection, DecodeJSON must decode the same (it may accept more: members
// it skips are only scanned).
func FuzzDecodeJSON(f *testing.F) {
	for _, pod := range []*corev1.Pod{testPod(1, false), testPod(2, true), {}} {
		js, err := json.Marshal(pod)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js)
		f.Add(js[:len(js)/2])
	}
	f.Add([]byte(`{"Metadata":{"NAME":"a\u0041","labels":null},"status":{"phase":"\u00e9"}}`))
	view := mustPlan[*PodView, *corev1.Pod](f)
	wide := mustPlan[*wideView, *corev1.Pod](f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJSON(t, view, data)
		checkJSON(t, wide, data)
	})
}

func checkJSON[P any](t *testing.T, plan *projection.Plan[P], data []byte) {
	got, err := plan.DecodeJSON(data)
	want := reflect.New(reflect.TypeFor[P]().Elem()).Interface().(P)
	if utiljson.Unmarshal(data, want) != nil {
		return
	}
	if err != nil {
		t.Fatalf("client-go's JSON decoding decodes %q, DecodeJSON fails: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeJSON differs from client-go's JSON decoding (case-sensitive) on %q:\n got %+v\nwant %+v", data, got, want)
	}
}
