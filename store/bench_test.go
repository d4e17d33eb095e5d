package store

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchPods returns n pods spread over 100 namespaces and 50 nodes, with
// labels like a Deployment's.
func benchPods(n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		app := fmt.Sprint("app-", i%37)
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       fmt.Sprint("ns-", i%100),
				Name:            fmt.Sprintf("%s-%08x-%d", app, i*2654435761, i),
				ResourceVersion: fmt.Sprint(1000 + i),
				Labels:          map[string]string{"app": app, "tier": "backend", "pod-template-hash": fmt.Sprintf("%x", i%7)},
			},
			Spec: corev1.PodSpec{NodeName: fmt.Sprint("node-", i%50), Containers: []corev1.Container{{Name: "main", Image: "registry/app:1"}}},
		}
	}
	return pods
}

// benchConfigMaps returns n ConfigMaps, metadata only, spread over
// namespaces namespaces, their names in no order a map would keep.
func benchConfigMaps(n, namespaces int) []*corev1.ConfigMap {
	cms := make([]*corev1.ConfigMap, n)
	for i := range cms {
		cms[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", i%namespaces),
			Name: fmt.Sprintf("cm-%08x-%d", i*2654435761, i), ResourceVersion: fmt.Sprint(1000 + i)}}
	}
	return cms
}

// newBenchIndexer returns a store of pods with three indexes: namespace,
// node and app.
func newBenchIndexer(b *testing.B, pods []*corev1.Pod) *Indexer[*corev1.Pod] {
	b.Helper()
	s, err := New(Options[*corev1.Pod]{Indexers: Indexers[*corev1.Pod]{
		"node": func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil },
		"app":  func(p *corev1.Pod) ([]string, error) { return []string{p.Labels["app"]}, nil },
	}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Replace(pods, "1"); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkIndexer_GetByKey(b *testing.B) {
	pods := benchPods(10_000)
	s := newBenchIndexer(b, pods)
	keys := s.ListKeys()
	i := 0
	for b.Loop() {
		if _, ok := s.GetByKey(keys[i%len(keys)]); !ok {
			b.Fatal("missing")
		}
		i++
	}
}

func BenchmarkIndexer_List(b *testing.B) {
	s := newBenchIndexer(b, benchPods(10_000))
	for b.Loop() {
		if len(s.List()) != 10_000 {
			b.Fatal("short list")
		}
	}
}

func BenchmarkIndexer_ByIndex(b *testing.B) {
	s := newBenchIndexer(b, benchPods(10_000))
	i := 0
	for b.Loop() {
		if got, err := s.ByIndex(NamespaceIndex, fmt.Sprint("ns-", i%100)); err != nil || len(got) != 100 {
			b.Fatal(len(got), err)
		}
		i++
	}
}

func BenchmarkIndexer_UpdateThreeIndexes(b *testing.B) {
	pods := benchPods(10_000)
	s := newBenchIndexer(b, pods)
	next := benchPods(10_000) // same keys, new objects: some move node
	for i, p := range next {
		p.Spec.NodeName = fmt.Sprint("node-", (i+i%3)%50)
	}
	i := 0
	for b.Loop() {
		if err := s.Update(next[i%len(next)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkIndexer_Replace100k(b *testing.B) {
	pods := benchPods(100_000)
	s := newBenchIndexer(b, nil)
	for b.Loop() {
		if err := s.Replace(pods, "2"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexer_EventThenRead100k is an informer's writes and a
// worker's reads in a store of 100,000 objects: each event brings a new
// object and its key freshly built (as the informer's MetaNamespaceKeyFunc
// builds it), stored with Put; the worker reads by that key a thousand
// events later (the queue's delay), in an order that defeats the CPU's
// caches.
func BenchmarkIndexer_EventThenRead100k(b *testing.B) {
	const n, lag = 100_000, 1000
	s, err := New(Options[*corev1.ConfigMap]{})
	if err != nil {
		b.Fatal(err)
	}
	cms := benchConfigMaps(n, 100)
	if err := s.Replace(cms, "1"); err != nil {
		b.Fatal(err)
	}
	var queued [lag]string
	for i := range queued {
		queued[i] = cms[i].Namespace + "/" + cms[i].Name
	}
	i := 0
	for b.Loop() {
		cm := *cms[(i*7919)%n] // a new object per event, as a decoder gives; 7919 is prime: every object once, far apart
		key := cm.Namespace + "/" + cm.Name
		if _, _, err := s.Put(key, &cm); err != nil {
			b.Fatal(err)
		}
		if _, ok := s.GetByKey(queued[i%lag]); !ok {
			b.Fatal("missing")
		}
		queued[i%lag] = key
		i++
	}
}

// BenchmarkIndexer_Load100k is a load into an empty store, as an informer
// applies an initial list or a snapshot: Reserve, then a Put per object
// with its key freshly built, in a streamed relist. The objects sit in one
// namespace (a namespaced informer) or in a hundred, and the namespace
// index is kept (read=true: something read by namespace before the load,
// as a lister does) or not.
func BenchmarkIndexer_Load100k(b *testing.B) {
	const n = 100_000
	for _, namespaces := range []int{1, 100} {
		for _, read := range []bool{false, true} {
			b.Run(fmt.Sprintf("namespaces=%d/read=%t", namespaces, read), func(b *testing.B) {
				cms := benchConfigMaps(n, namespaces)
				for b.Loop() {
					b.StopTimer()
					s, err := New(Options[*corev1.ConfigMap]{})
					if err != nil {
						b.Fatal(err)
					}
					if read {
						if _, err := s.ByIndex(NamespaceIndex, "ns-0"); err != nil {
							b.Fatal(err)
						}
					}
					keys := make([]string, n)
					for i, cm := range cms {
						keys[i] = cm.Namespace + "/" + cm.Name
					}
					b.StartTimer()
					s.Reserve(n)
					s.BeginRelist()
					for i, cm := range cms {
						if _, _, err := s.Put(keys[i], cm); err != nil {
							b.Fatal(err)
						}
					}
					s.EndRelist("2")
				}
			})
		}
	}
}

// BenchmarkIndexer_FirstReadByNamespace100k is the first read of one
// namespace of a store of 100,000 objects in 100 namespaces, which builds
// the namespace index.
func BenchmarkIndexer_FirstReadByNamespace100k(b *testing.B) {
	const n = 100_000
	cms := benchConfigMaps(n, 100)
	for b.Loop() {
		b.StopTimer()
		s, err := New(Options[*corev1.ConfigMap]{})
		if err != nil {
			b.Fatal(err)
		}
		s.BeginRelist()
		for _, cm := range cms {
			if err := s.Add(cm); err != nil {
				b.Fatal(err)
			}
		}
		s.EndRelist("2")
		b.StartTimer()
		if keys, _ := s.IndexKeys(NamespaceIndex, "ns-7"); len(keys) != n/100 {
			b.Fatalf("%d keys in ns-7; want %d", len(keys), n/100)
		}
	}
}
