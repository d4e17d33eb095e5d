package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// TestIndexer_concurrentReadersAndWriters runs writers (each owning a
// namespace, so the final content is known), readers checking that every
// read is consistent, and an AddIndexers racing with all of them. Run it
// with -race.
func TestIndexer_concurrentReadersAndWriters(t *testing.T) {
	leakcheck.Check(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	s := newTestIndexer(t)
	const writers, readers, steps, names = 3, 3, 500, 40
	finals := make([]map[string]*corev1.Pod, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			finals[w] = writeRandomly(t, s, fmt.Sprint("ns", w), rand.New(rand.NewPCG(seed, uint64(w))), steps, names)
		})
	}
	done := make(chan struct{})
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() { readConsistently(t, s, fmt.Sprint("ns", r%writers), done) })
	}
	wg.Go(func() {
		if err := s.AddIndexers(Indexers[*corev1.Pod]{"late": byLabel("app")}); err != nil {
			t.Errorf("AddIndexers: %v", err)
		}
	})
	wg.Wait()
	close(done)
	rg.Wait()

	if err := s.checkInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	want := map[string]*corev1.Pod{}
	for _, f := range finals {
		for k, p := range f {
			want[k] = p
		}
	}
	if got := sorted(s.ListKeys()); !slices.Equal(got, sorted(slices.Collect(mapKeys(want)))) {
		t.Errorf("final keys = %v, want %v", got, want)
	}
	for k, p := range want {
		late, err := s.Index("late", p)
		if err != nil {
			t.Fatalf("Index(late): %v", err)
		}
		if got, _ := s.GetByKey(k); got != p || (p.Labels["app"] != "" && !slices.Contains(late, p)) {
			t.Errorf("%s: got %p, want %p; in late index: %v", k, got, p, slices.Contains(late, p))
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// writeRandomly adds, updates and deletes pods of namespace ns and returns
// what it expects the store to hold for ns at the end.
func writeRandomly(t *testing.T, s *Indexer[*corev1.Pod], ns string, rnd *rand.Rand, steps, names int) map[string]*corev1.Pod {
	model := map[string]*corev1.Pod{}
	for i := range steps {
		name := fmt.Sprint("p", rnd.IntN(names))
		p := newPod(ns, name, fmt.Sprint(i+1), fmt.Sprint("app=a", rnd.IntN(5)), fmt.Sprintf("tags=t%d,u%d", rnd.IntN(3), rnd.IntN(3)))
		var err error
		if rnd.IntN(4) == 0 {
			err = s.Delete(p)
			delete(model, ns+"/"+name)
		} else {
			err = s.Update(p)
			model[ns+"/"+name] = p
		}
		if err != nil {
			t.Errorf("write %s: %v", name, err)
		}
	}
	return model
}

// readConsistently reads until done is closed, checking that every result
// agrees with the query that produced it.
func readConsistently(t *testing.T, s *Indexer[*corev1.Pod], ns string, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		inNS, err := s.ByIndex(NamespaceIndex, ns)
		if err != nil {
			t.Errorf("ByIndex: %v", err)
			return
		}
		for _, p := range inNS {
			if p.Namespace != ns {
				t.Errorf("ByIndex(namespace, %s) returned %s/%s", ns, p.Namespace, p.Name)
			}
		}
		tagged, _ := s.ByIndex("tags", "t1")
		for _, p := range tagged {
			if tags, _ := byTags(p); !slices.Contains(tags, "t1") {
				t.Errorf("ByIndex(tags, t1) returned %s with tags %v", p.Name, tags)
			}
		}
		_ = s.List()
		_ = s.ResourceVersion()
	}
}

// TestIndexer_firstReadByNamespaceRacesReplace reads a namespace for the
// first time while Replaces swap in caches, some built before the read
// (without the namespace index): every read gives one Replace's content
// whole, never an index missing from the cache it reads. Run it with
// -race.
func TestIndexer_firstReadByNamespaceRacesReplace(t *testing.T) {
	leakcheck.Check(t)
	const rounds, replaces, size = 200, 8, 5
	lists := make([][]*corev1.Pod, replaces)
	for r := range lists {
		for i := range size {
			lists[r] = append(lists[r], newPod("a", fmt.Sprintf("r%d-%d", r, i), fmt.Sprint(r+1)))
		}
	}
	for range rounds {
		s := newTestIndexer(t)
		if err := s.Replace(lists[0], "1"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for r := 1; r < replaces; r++ {
				if err := s.Replace(lists[r], fmt.Sprint(r+1)); err != nil {
					t.Error(err)
					return
				}
			}
		})
		var got []string
		wg.Go(func() {
			var err error
			if got, err = s.IndexKeys(NamespaceIndex, "a"); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		slices.Sort(got)
		if len(got) != size || !slices.ContainsFunc(lists, func(l []*corev1.Pod) bool {
			return got[0] == "a/"+l[0].Name && got[size-1] == "a/"+l[size-1].Name
		}) {
			t.Fatalf("the first read of namespace a gave %v; want one list's %d keys", got, size)
		}
		if !s.c.nsIndexed || s.checkInvariants() != nil {
			t.Fatalf("after the read the store keeps the index: %v; invariants: %v", s.c.nsIndexed, s.checkInvariants())
		}
	}
}
