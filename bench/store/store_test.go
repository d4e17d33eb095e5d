// Package store_test benchmarks ctrlkit's store against client-go's
// tools/cache indexer: the same pods, the same indexes (namespace, node and
// app), the same operations. Every benchmark has a /ctrlkit and a
// /client-go sub-benchmark; cmd/benchtable pairs them.
package store_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/store"
)

const (
	size       = 10_000  // objects in the store for Get, List, ByIndex, Update
	replaceN   = 100_000 // objects in one Replace
	namespaces = 100
)

// pods returns n realistic pods spread over 100 namespaces and 50 nodes.
func pods(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		app := fmt.Sprint("app-", i%37)
		out[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       fmt.Sprint("ns-", i%namespaces),
				Name:            fmt.Sprintf("%s-%08x-%d", app, i*2654435761, i),
				ResourceVersion: fmt.Sprint(1000 + i),
				Labels:          map[string]string{"app": app, "tier": "backend", "pod-template-hash": fmt.Sprintf("%x", i%7)},
			},
			Spec: corev1.PodSpec{NodeName: fmt.Sprint("node-", i%50), Containers: []corev1.Container{{Name: "main", Image: "registry/app:1"}}},
		}
	}
	return out
}

// moved returns pods with the same keys as pods(n) and a third of them on
// another node, so updates change an index value now and then.
func moved(n int) []*corev1.Pod {
	out := pods(n)
	for i, p := range out {
		p.Spec.NodeName = fmt.Sprint("node-", (i+i%3)%50)
		p.ResourceVersion = fmt.Sprint(2000000 + i)
	}
	return out
}

func nodeOf(p *corev1.Pod) string { return p.Spec.NodeName }
func appOf(p *corev1.Pod) string  { return p.Labels["app"] }

func newOurs(b *testing.B, items []*corev1.Pod) *store.Indexer[*corev1.Pod] {
	b.Helper()
	s, err := store.New(store.Options[*corev1.Pod]{Indexers: store.Indexers[*corev1.Pod]{
		"node": func(p *corev1.Pod) ([]string, error) { return []string{nodeOf(p)}, nil },
		"app":  func(p *corev1.Pod) ([]string, error) { return []string{appOf(p)}, nil },
	}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Replace(items, "1"); err != nil {
		b.Fatal(err)
	}
	// ctrlkit keeps the namespace index once something reads it; client-go
	// always keeps it. Read it once, so that both sides maintain the same
	// three indexes.
	if _, err := s.IndexKeys(store.NamespaceIndex, ""); err != nil {
		b.Fatal(err)
	}
	return s
}

func newTheirs(b *testing.B, items []*corev1.Pod) cache.Indexer {
	b.Helper()
	s := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"node":               func(obj any) ([]string, error) { return []string{nodeOf(obj.(*corev1.Pod))}, nil },
		"app":                func(obj any) ([]string, error) { return []string{appOf(obj.(*corev1.Pod))}, nil },
	})
	if err := s.Replace(toAny(items), "1"); err != nil {
		b.Fatal(err)
	}
	return s
}

func toAny(items []*corev1.Pod) []any {
	out := make([]any, len(items))
	for i, p := range items {
		out[i] = p
	}
	return out
}

func keysOf(items []*corev1.Pod) []string {
	out := make([]string, len(items))
	for i, p := range items {
		out[i] = p.Namespace + "/" + p.Name
	}
	return out
}

func BenchmarkGet(b *testing.B) {
	items := pods(size)
	keys := keysOf(items)
	b.Run("ctrlkit", func(b *testing.B) {
		s, i := newOurs(b, items), 0
		for b.Loop() {
			if _, ok := s.GetByKey(keys[i%size]); !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
	b.Run("client-go", func(b *testing.B) {
		s, i := newTheirs(b, items), 0
		for b.Loop() {
			if _, ok, _ := s.GetByKey(keys[i%size]); !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
}

func BenchmarkList(b *testing.B) {
	items := pods(size)
	b.Run("ctrlkit", func(b *testing.B) {
		s := newOurs(b, items)
		for b.Loop() {
			if len(s.List()) != size {
				b.Fatal("short list")
			}
		}
	})
	b.Run("client-go", func(b *testing.B) {
		s := newTheirs(b, items)
		for b.Loop() {
			if len(s.List()) != size {
				b.Fatal("short list")
			}
		}
	})
}

func BenchmarkByIndex(b *testing.B) {
	items := pods(size)
	nss := make([]string, namespaces)
	for i := range nss {
		nss[i] = fmt.Sprint("ns-", i)
	}
	const want = size / namespaces
	b.Run("ctrlkit", func(b *testing.B) {
		s, i := newOurs(b, items), 0
		for b.Loop() {
			if got, err := s.ByIndex(store.NamespaceIndex, nss[i%namespaces]); err != nil || len(got) != want {
				b.Fatal(len(got), err)
			}
			i++
		}
	})
	b.Run("client-go", func(b *testing.B) {
		s, i := newTheirs(b, items), 0
		for b.Loop() {
			if got, err := s.ByIndex(cache.NamespaceIndex, nss[i%namespaces]); err != nil || len(got) != want {
				b.Fatal(len(got), err)
			}
			i++
		}
	})
}

// BenchmarkUpdateThreeIndexes updates existing pods in a store with three
// indexes (namespace, node, app); a third of the updates move the pod to
// another node.
func BenchmarkUpdateThreeIndexes(b *testing.B) {
	items, next := pods(size), moved(size)
	b.Run("ctrlkit", func(b *testing.B) {
		s, i := newOurs(b, items), 0
		for b.Loop() {
			if err := s.Update(next[i%size]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("client-go", func(b *testing.B) {
		s, i := newTheirs(b, items), 0
		for b.Loop() {
			if err := s.Update(next[i%size]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkReplace100k swaps the content of a store with three indexes for
// a list of 100,000 pods, as a relist does.
func BenchmarkReplace100k(b *testing.B) {
	items := pods(replaceN)
	b.Run("ctrlkit", func(b *testing.B) {
		s := newOurs(b, nil)
		for b.Loop() {
			if err := s.Replace(items, "2"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-go", func(b *testing.B) {
		s, list := newTheirs(b, nil), toAny(items)
		for b.Loop() {
			if err := s.Replace(list, "2"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
