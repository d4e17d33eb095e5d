package store

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIndexer_indexFuncErrorLeavesStoreUnchanged(t *testing.T) {
	poisoned := func(name string) *corev1.Pod { return newPod("ns", name, "99", "app=x", "poison=true") }
	for _, tc := range []struct {
		name string
		op   func(s *Indexer[*corev1.Pod]) error
	}{
		{name: "a failing add adds nothing", op: func(s *Indexer[*corev1.Pod]) error { return s.Add(poisoned("new")) }},
		{name: "a failing update keeps the old object and its index values", op: func(s *Indexer[*corev1.Pod]) error {
			return s.Update(poisoned("a"))
		}},
		{name: "a failing replace keeps the whole old content", op: func(s *Indexer[*corev1.Pod]) error {
			return s.Replace([]*corev1.Pod{newPod("ns", "z", "50", "app=z"), poisoned("y")}, "100")
		}},
		{name: "a failing index added later is not added", op: func(s *Indexer[*corev1.Pod]) error {
			return s.AddIndexers(Indexers[*corev1.Pod]{"zone": func(p *corev1.Pod) ([]string, error) {
				if p.Name == "b" {
					return nil, errPoison
				}
				return []string{"zone"}, nil
			}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestIndexer(t)
			a := newPod("ns", "a", "1", "app=web", "tags=p,q")
			mustAdd(t, s, a, newPod("ns", "b", "2", "app=db"))
			before := takeSnapshot(t, s)
			err := tc.op(s)
			if !errors.Is(err, ErrIndexFunc) || !errors.Is(err, errPoison) {
				t.Fatalf("err = %v, want ErrIndexFunc wrapping the function's error", err)
			}
			if after := takeSnapshot(t, s); !after.equal(before) {
				t.Errorf("the store changed: %+v -> %+v", before, after)
			}
			if got, _ := s.GetByKey("ns/a"); got != a {
				t.Errorf("ns/a = %p, want the original %p", got, a)
			}
			if _, err := s.ByIndex("zone", "zone"); !errors.Is(err, ErrNoIndex) {
				t.Errorf("ByIndex(zone) err = %v, want ErrNoIndex", err)
			}
		})
	}
	t.Run("a failing index function in a query is returned", func(t *testing.T) {
		s := newTestIndexer(t)
		if _, err := s.Index("app", poisoned("q")); !errors.Is(err, errPoison) {
			t.Errorf("Index err = %v, want the function's error", err)
		}
	})
}

func TestIndexer_userCodeRunsWithoutTheLock(t *testing.T) {
	var s *Indexer[*corev1.Pod]
	calls := 0
	// probe fails the test if a writer holds the lock while it runs, and
	// reads the store, which would deadlock if the caller held the lock.
	probe := func(p *corev1.Pod) ([]string, error) {
		calls++
		if !s.mu.TryRLock() {
			t.Errorf("index function called with the write lock held (pod %s)", p.Name)
		} else {
			s.mu.RUnlock()
		}
		_ = s.List()
		_, _ = s.ByIndex(NamespaceIndex, p.Namespace)
		return []string{p.Name}, nil
	}
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{name: "add calls index functions unlocked", op: func() error { return s.Add(newPod("ns", "a", "1")) }},
		{name: "update calls index functions unlocked", op: func() error { return s.Update(newPod("ns", "a", "2")) }},
		{name: "replace calls index functions unlocked", op: func() error {
			return s.Replace([]*corev1.Pod{newPod("ns", "a", "3"), newPod("ns", "b", "3")}, "3")
		}},
		{name: "index calls the index function unlocked", op: func() error {
			_, err := s.Index("probe", newPod("ns", "a", ""))
			return err
		}},
		{name: "add indexers calls the new functions unlocked", op: func() error {
			return s.AddIndexers(Indexers[*corev1.Pod]{"probe2": probe})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			s, err = New(Options[*corev1.Pod]{Indexers: Indexers[*corev1.Pod]{"probe": probe}})
			if err != nil {
				t.Fatal(err)
			}
			mustAdd(t, s, newPod("ns", "a", "0"))
			calls = 0
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			if calls == 0 {
				t.Error("the index function was not called; the test proves nothing")
			}
		})
	}
}
