package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIndexer_ByIndex(t *testing.T) {
	s := newTestIndexer(t)
	mustAdd(t, s,
		newPod("ns", "a", "1", "app=web", "tags=x,y"),
		newPod("ns", "b", "2", "app=web", "tags=y,z"),
		newPod("other", "c", "3", "app=db", "tags=x,x"),
		newPod("", "node", "4"),
	)
	for _, tc := range []struct {
		name, index, value string
		want               []string
	}{
		{name: "a single-valued index finds every object with the value", index: "app", value: "web", want: []string{"ns/a", "ns/b"}},
		{name: "a multi-valued index finds an object under each of its values", index: "tags", value: "y", want: []string{"ns/a", "ns/b"}},
		{name: "an object listing a value twice is found once", index: "tags", value: "x", want: []string{"ns/a", "other/c"}},
		{name: "a value nobody carries finds nothing", index: "app", value: "cache"},
		{name: "the namespace index is built in", index: NamespaceIndex, value: "ns", want: []string{"ns/a", "ns/b"}},
		{name: "cluster-scoped objects are under the empty namespace", index: NamespaceIndex, value: "", want: []string{"node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := s.ByIndex(tc.index, tc.value)
			if err != nil {
				t.Fatalf("ByIndex: %v", err)
			}
			ks, err := s.IndexKeys(tc.index, tc.value)
			if err != nil {
				t.Fatalf("IndexKeys: %v", err)
			}
			if got := keys(objs); !slices.Equal(got, sorted(tc.want)) {
				t.Errorf("ByIndex = %v, want %v", got, tc.want)
			}
			if got := sorted(ks); !slices.Equal(got, sorted(tc.want)) {
				t.Errorf("IndexKeys = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("the index values are those some object carries", func(t *testing.T) {
		got, err := s.ListIndexFuncValues("tags")
		if err != nil || !slices.Equal(sorted(got), []string{"x", "y", "z"}) {
			t.Errorf("ListIndexFuncValues(tags) = %v, %v; want [x y z]", got, err)
		}
	})
	t.Run("index returns the union over the object's values", func(t *testing.T) {
		got, err := s.Index("tags", newPod("elsewhere", "probe", "", "tags=z,x,z"))
		if err != nil || !slices.Equal(keys(got), []string{"ns/a", "ns/b", "other/c"}) {
			t.Errorf("Index(tags, z,x) = %v, %v; want ns/a ns/b other/c", keys(got), err)
		}
	})
}

func TestIndexer_unknownIndex(t *testing.T) {
	s := newTestIndexer(t)
	mustAdd(t, s, newPod("ns", "a", "1", "app=web"))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{name: "by index fails", call: func() error { _, err := s.ByIndex("nope", "web"); return err }},
		{name: "index keys fails", call: func() error { _, err := s.IndexKeys("nope", "web"); return err }},
		{name: "index fails", call: func() error { _, err := s.Index("nope", newPod("ns", "a", "")); return err }},
		{name: "listing index values fails", call: func() error { _, err := s.ListIndexFuncValues("nope"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrNoIndex) {
				t.Errorf("err = %v, want ErrNoIndex", err)
			}
		})
	}
}

func TestIndexer_emptyIndexSetsAreRemoved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *Indexer[*corev1.Pod], i int) error
	}{
		{name: "deleting every object leaves no values", change: func(s *Indexer[*corev1.Pod], i int) error {
			return s.Delete(newPod("ns", fmt.Sprint(i), ""))
		}},
		{name: "moving every object to one value leaves only that value", change: func(s *Indexer[*corev1.Pod], i int) error {
			return s.Update(newPod("ns", fmt.Sprint(i), "", "app=last", "tags=last"))
		}},
		{name: "a replace with new values forgets the old ones", change: func(s *Indexer[*corev1.Pod], i int) error {
			if i > 0 {
				return nil
			}
			return s.Replace([]*corev1.Pod{newPod("ns", "0", "", "app=last", "tags=last")}, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestIndexer(t)
			const n = 1000 // high cardinality: one value per object
			for i := range n {
				mustAdd(t, s, newPod("ns", fmt.Sprint(i), "", fmt.Sprintf("app=a%d", i), fmt.Sprintf("tags=t%d,u%d", i, i)))
			}
			if _, err := s.IndexKeys(NamespaceIndex, "ns"); err != nil { // keep the namespace index: its lists too must go when empty
				t.Fatal(err)
			}
			for i := range n {
				if err := tc.change(s, i); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			for _, index := range []string{"app", "tags"} {
				vals, _ := s.ListIndexFuncValues(index)
				if len(vals) > 1 || (len(vals) == 1 && vals[0] != "last") {
					t.Errorf("index %q keeps %d values, want at most [last]", index, len(vals))
				}
				if got := len(s.c.indices[s.funcs.Load().pos[index]]); got != len(vals) {
					t.Errorf("index %q holds %d sets for %d values", index, got, len(vals))
				}
			}
		})
	}
}

func TestIndexer_AddIndexers(t *testing.T) {
	byZone := byLabel("zone")
	for _, tc := range []struct {
		name    string
		add     Indexers[*corev1.Pod]
		wantErr error
	}{
		{name: "a new index on a populated store indexes existing objects", add: Indexers[*corev1.Pod]{"zone": byZone}},
		{name: "several new indexes at once are all added", add: Indexers[*corev1.Pod]{"zone": byZone, "zone2": byZone}},
		{name: "no new index is a no-op", add: nil},
		{name: "a name already in use is refused", add: Indexers[*corev1.Pod]{"app": byZone}, wantErr: ErrDuplicateIndex},
		{name: "the namespace index cannot be redefined", add: Indexers[*corev1.Pod]{NamespaceIndex: byZone}, wantErr: ErrDuplicateIndex},
		{name: "an empty name is refused", add: Indexers[*corev1.Pod]{"": byZone}, wantErr: ErrInvalidIndex},
		{name: "a nil function is refused", add: Indexers[*corev1.Pod]{"zone": nil}, wantErr: ErrInvalidIndex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestIndexer(t)
			mustAdd(t, s, newPod("ns", "a", "1", "zone=eu"), newPod("ns", "b", "2", "zone=us"), newPod("ns", "c", "3"))
			before := takeSnapshot(t, s)
			err := s.AddIndexers(tc.add)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if after := takeSnapshot(t, s); !after.equal(before) {
					t.Errorf("a failed AddIndexers changed the store: %+v -> %+v", before, after)
				}
				return
			}
			if err := s.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			for name := range tc.add {
				got, err := s.ByIndex(name, "eu")
				if err != nil || !slices.Equal(keys(got), []string{"ns/a"}) {
					t.Errorf("ByIndex(%s, eu) = %v, %v; want [ns/a]", name, keys(got), err)
				}
			}
		})
	}
	t.Run("an index added later also indexes later writes", func(t *testing.T) {
		s := newTestIndexer(t)
		if err := s.AddIndexers(Indexers[*corev1.Pod]{"zone": byZone}); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, s, newPod("ns", "a", "1", "zone=eu"))
		got, err := s.ByIndex("zone", "eu")
		if err != nil || !slices.Equal(keys(got), []string{"ns/a"}) {
			t.Errorf("ByIndex(zone, eu) = %v, %v; want [ns/a]", keys(got), err)
		}
	})
}

func TestNew_validatesIndexers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idx     Indexers[*corev1.Pod]
		wantErr error
	}{
		{name: "no indexers gives the namespace index only"},
		{name: "redefining the namespace index is refused", idx: Indexers[*corev1.Pod]{NamespaceIndex: byTags}, wantErr: ErrDuplicateIndex},
		{name: "a nil function is refused", idx: Indexers[*corev1.Pod]{"tags": nil}, wantErr: ErrInvalidIndex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options[*corev1.Pod]{Indexers: tc.idx})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				if _, err := s.ByIndex(NamespaceIndex, "ns"); err != nil {
					t.Errorf("ByIndex(namespace): %v", err)
				}
			}
		})
	}
}

// Entries come sixteen to a chunk; a removed object's entry is emptied and
// reused by the next object stored, and once most objects are deleted the
// free entries are let go rather than kept for a peak that passed.
func TestIndexer_entriesOfRemovedObjectsAreReusedThenLetGo(t *testing.T) {
	s := newTestIndexer(t)
	const n = 4096
	for i := range n {
		mustAdd(t, s, newPod("ns", fmt.Sprint(i), "1", "app=a"))
	}
	gone := s.c.items["ns/7"]
	if err := s.Delete(newPod("ns", "7", "2")); err != nil {
		t.Fatal(err)
	}
	if gone.obj != nil || gone.key != "" || gone.vals != nil || len(s.c.free) != 1 {
		t.Fatalf("a removed entry holds %v %q %v (want nothing); %d free, want 1", gone.obj, gone.key, gone.vals, len(s.c.free))
	}
	mustAdd(t, s, newPod("ns", "new", "3", "app=b"))
	if s.c.items["ns/new"] != gone || len(s.c.free) != 0 {
		t.Fatalf("the next object got a fresh entry (%d free): want the removed one's", len(s.c.free))
	}
	for i := range n - 100 {
		if err := s.Delete(newPod("ns", fmt.Sprint(i), "4")); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.c.free) > max(1024, len(s.c.items)) {
		t.Errorf("%d free entries kept for %d objects, want at most 1,024 or as many as are in use", len(s.c.free), len(s.c.items))
	}
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	for i := n - 100; i < n; i++ {
		if got, ok := s.GetByKey("ns/" + fmt.Sprint(i)); !ok || got.Name != fmt.Sprint(i) {
			t.Fatalf("ns/%d: %v, %v after the deletes", i, got, ok)
		}
	}
}
