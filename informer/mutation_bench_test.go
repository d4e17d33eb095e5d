package informer

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// benchPod is a Pod of the size controllers usually cache: labels,
// annotations, an owner, two containers with resources, and status.
func benchPod(n, version int) *corev1.Pod {
	container := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.example/" + name + ":1.2.3",
			Args:  []string{"--port=8080", "--verbose"},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "prod"}, {Name: "LEVEL", Value: "info"}},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%d", n), ResourceVersion: fmt.Sprint(version),
			Labels:          map[string]string{"app": "web", "tier": "frontend", "pod-template-hash": "5d8f9c"},
			Annotations:     map[string]string{"example.com/revision": "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f9c", UID: "1234"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{container("app"), container("sidecar")}, NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}},
	}
}

// BenchmarkInformer_applyUpdate measures the informer's cache write for one
// update of a Pod (no handler registered), with the mutation detector off
// and on: on, each update also deep-copies the new object and compares the
// one it replaces with its copy.
func BenchmarkInformer_applyUpdate(b *testing.B) {
	const keys = 1000
	pods := make([][2]*corev1.Pod, keys)
	for n := range keys {
		pods[n] = [2]*corev1.Pod{benchPod(n, 2*n+1), benchPod(n, 2*n+2)}
	}
	for _, d := range []Detection{DetectNever, DetectAlways} {
		name := map[Detection]string{DetectNever: "detector=off", DetectAlways: "detector=on"}[d]
		b.Run(name, func(b *testing.B) {
			opts := Options[*corev1.Pod]{FactoryOptions: FactoryOptions{DetectMutations: d}}
			inf, err := New[*corev1.Pod](benchLW{}, opts)
			if err != nil {
				b.Fatal(err)
			}
			for n := range keys {
				applyOne(inf, "ns/"+pods[n][0].Name, deltafifo.Delta[*corev1.Pod]{Type: deltafifo.Updated, Object: pods[n][0]})
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				p := pods[n%keys][(n/keys+1)%2]
				applyOne(inf, "ns/"+p.Name, deltafifo.Delta[*corev1.Pod]{Type: deltafifo.Updated, Object: p})
				n++
			}
			if errs := inf.det; errs != nil && len(errs.found) > 0 {
				b.Fatalf("reported mutations: %v", errs.found)
			}
		})
	}
}

// applyOne applies one delta of key as the processing loop applies a
// batch of one key.
func applyOne[T object.Object](inf *SharedIndexInformer[T], key string, d deltafifo.Delta[T]) {
	ds := [1]deltafifo.Delta[T]{d}
	batch := [1]deltafifo.Item[T]{{Key: key, Deltas: ds[:]}}
	inf.process(batch[:])
}

// benchLW is a ListerWatcher the benchmark never runs.
type benchLW struct {
	reflector.ListerWatcher[*corev1.Pod]
}
