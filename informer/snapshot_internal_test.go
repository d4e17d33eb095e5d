package informer

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// The default protobuf codec interns while it decodes, unless the informer
// shares maps whole or the codec is the caller's or JSON; what it decodes
// equals the generated decoder's output.
func TestSnapshots_theProtobufCodecInternsWhileItDecodes(t *testing.T) {
	cm := func(name string) []byte {
		b, err := (&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{"app": "web"}}, Data: map[string]string{"config.yaml": name}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, err := newSnapshots(Snapshot[*corev1.ConfigMap]{Path: "x"})
	if err != nil {
		t.Fatal(err)
	}
	s.internWhileDecoding(false)
	if !s.interned {
		t.Fatal("the default protobuf codec does not intern")
	}
	a, errA := s.cfg.Decode(cm("a"))
	b, errB := s.cfg.Decode(cm("b"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	var want corev1.ConfigMap
	if err := want.Unmarshal(cm("a")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, &want) {
		t.Fatalf("decoded %+v, want %+v", a, &want)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Namespace, b.Namespace) || !same(a.Labels["app"], b.Labels["app"]) {
		t.Error("two objects decoded one after the other do not share their namespace and label strings")
	}
	if _, err := s.cfg.Decode([]byte{0xff}); err == nil {
		t.Error("bytes that are no ConfigMap decoded")
	}
	// The metadata last: decoded whole, then interned.
	bytesA := cm("a")
	_, _, n := protowire.ConsumeField(bytesA)
	reordered := append(append([]byte(nil), bytesA[n:]...), bytesA[:n]...)
	c, err := s.cfg.Decode(reordered)
	if err != nil || !reflect.DeepEqual(c, &want) {
		t.Fatalf("metadata last: decoded %+v, %v; want %+v", c, err, &want)
	}
	if !same(c.Namespace, a.Namespace) {
		t.Error("an object with its metadata last was not interned")
	}

	for name, s := range map[string]func() bool{
		"shared maps": func() bool {
			s, _ := newSnapshots(Snapshot[*corev1.ConfigMap]{Path: "x"})
			s.internWhileDecoding(true)
			return s.interned
		},
		"the caller's codec": func() bool {
			enc, dec := snapshot.JSON[*corev1.ConfigMap]()
			s, _ := newSnapshots(Snapshot[*corev1.ConfigMap]{Path: "x", Encode: enc, Decode: dec})
			s.internWhileDecoding(false)
			return s.interned
		},
		"JSON": func() bool {
			s, _ := newSnapshots(Snapshot[*unstructured.Unstructured]{Path: "x"})
			s.internWhileDecoding(false)
			return s.interned
		},
	} {
		if s() {
			t.Errorf("%s: the codec interns while decoding, want not", name)
		}
	}
}

// BenchmarkSnapshotDecode decodes snapshot records as a warm start does:
// the generated decoder and then the informer's table (the path for a
// caller's codec or ShareMaps), against the default codec interning while
// it decodes; of Pods with labels, annotations and an owner, and of
// ConfigMaps with one 500-byte value and no labels (cmd/warmrestart's).
func BenchmarkSnapshotDecode(b *testing.B) {
	const n = 1000
	pods, cms := make([][]byte, n), make([][]byte, n)
	for i := range n {
		yes := true
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d-%d", i%50, i), Namespace: fmt.Sprintf("team-%d", i%20),
			UID: types.UID(fmt.Sprintf("4f3c2b1a-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			Labels: map[string]string{"app": fmt.Sprintf("web-%d", i%50), "pod-template-hash": fmt.Sprintf("7d9f8c%d", i%50),
				"tier": "front", "app.kubernetes.io/part-of": "shop"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z", "team": "payments"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("web-%d-7d9f8c", i%50),
				UID: types.UID(fmt.Sprintf("rs-%d", i%50)), Controller: &yes, BlockOwnerDeletion: &yes}},
		}, Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%200), ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "web", Image: fmt.Sprintf("registry.example/web:1.%d", i%20),
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250)}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%06d", i), Namespace: "bench",
			UID: types.UID(fmt.Sprintf("4f3c2b1a-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			CreationTimestamp: metav1.Unix(1_800_000_000, 0)}, Data: map[string]string{"data": strings.Repeat("x", 500)}}
		var err error
		if pods[i], err = p.Marshal(); err != nil {
			b.Fatal(err)
		}
		if cms[i], err = cm.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pods", func(b *testing.B) { benchmarkSnapshotDecode[*corev1.Pod](b, pods) })
	b.Run("configmaps", func(b *testing.B) { benchmarkSnapshotDecode[*corev1.ConfigMap](b, cms) })
}

func benchmarkSnapshotDecode[T object.Object](b *testing.B, records [][]byte) {
	for _, interning := range []bool{false, true} {
		name := map[bool]string{false: "decode_then_intern", true: "intern_while_decoding"}[interning]
		b.Run(name, func(b *testing.B) {
			s, err := newSnapshots(Snapshot[T]{Path: "x"})
			if err != nil {
				b.Fatal(err)
			}
			s.internWhileDecoding(!interning) // sharing maps keeps the decode-then-intern codec
			table := intern.NewTable(0)
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range records {
					obj, err := s.cfg.Decode(r)
					if err != nil {
						b.Fatal(err)
					}
					if !s.interned {
						table.Object(any(obj))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(records)), "ns/object")
		})
	}
}
