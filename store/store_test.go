package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestIndexer_writes(t *testing.T) {
	a1, a2 := newPod("ns", "a", "1"), newPod("ns", "a", "2")
	b, node := newPod("other", "b", "3"), newPod("", "node", "4")
	for _, tc := range []struct {
		name    string
		ops     func(s *Indexer[*corev1.Pod]) error
		want    []*corev1.Pod // the objects stored afterwards, by identity
		wantErr error
	}{
		{name: "add stores objects under namespace slash name", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a1), s.Add(b), s.Add(node))
		}, want: []*corev1.Pod{a1, b, node}},
		{name: "update replaces the object under the same key", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a1), s.Update(a2))
		}, want: []*corev1.Pod{a2}},
		{name: "add of an existing key also replaces it", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a1), s.Add(a2))
		}, want: []*corev1.Pod{a2}},
		{name: "update of a missing key adds it", ops: func(s *Indexer[*corev1.Pod]) error {
			return s.Update(a1)
		}, want: []*corev1.Pod{a1}},
		{name: "delete removes by key even with a stale object", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a2), s.Add(b), s.Delete(a1))
		}, want: []*corev1.Pod{b}},
		{name: "delete of a missing key is not an error", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(b), s.Delete(a1))
		}, want: []*corev1.Pod{b}},
		{name: "an object without a name is refused", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(b), s.Add(newPod("ns", "", "9")))
		}, want: []*corev1.Pod{b}, wantErr: object.ErrEmptyName},
		{name: "deleting an object without a name is refused", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(b), s.Delete(newPod("other", "", "9")))
		}, want: []*corev1.Pod{b}, wantErr: object.ErrEmptyName},
		{name: "replace keeps exactly the listed objects", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a1), s.Add(b), s.Replace([]*corev1.Pod{a2, node}, "10"))
		}, want: []*corev1.Pod{a2, node}},
		{name: "replace with a repeated key keeps the later object", ops: func(s *Indexer[*corev1.Pod]) error {
			return s.Replace([]*corev1.Pod{a1, a2}, "10")
		}, want: []*corev1.Pod{a2}},
		{name: "replace with nothing empties the store", ops: func(s *Indexer[*corev1.Pod]) error {
			return errors.Join(s.Add(a1), s.Replace(nil, "10"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestIndexer(t)
			if err := tc.ops(s); !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			assertContent(t, s, tc.want)
		})
	}
}

// assertContent checks that s holds exactly want, by identity, through
// every read method.
func assertContent(t *testing.T, s *Indexer[*corev1.Pod], want []*corev1.Pod) {
	t.Helper()
	if err := s.checkInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	if got := keys(s.List()); !slices.Equal(got, keys(want)) {
		t.Errorf("List keys = %v, want %v", got, keys(want))
	}
	if got := sorted(s.ListKeys()); !slices.Equal(got, keys(want)) {
		t.Errorf("ListKeys = %v, want %v", got, keys(want))
	}
	if s.Len() != len(want) {
		t.Errorf("Len = %d, want %d", s.Len(), len(want))
	}
	for _, p := range want {
		got, ok, err := s.Get(p)
		if err != nil || !ok || got != p {
			t.Errorf("Get(%s/%s) = %p, %v, %v; want %p", p.Namespace, p.Name, got, ok, err, p)
		}
	}
}

func TestIndexer_readsReturnSnapshots(t *testing.T) {
	s := newTestIndexer(t)
	mustAdd(t, s, newPod("ns", "a", "1", "app=x"), newPod("ns", "b", "2", "app=x"))
	for _, tc := range []struct {
		name string
		read func() []*corev1.Pod
	}{
		{name: "a list slice belongs to the caller", read: s.List},
		{name: "a by-index slice belongs to the caller", read: func() []*corev1.Pod {
			out, _ := s.ByIndex("app", "x")
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.read()
			clear(got)
			if again := tc.read(); len(again) != 2 || again[0] == nil || again[1] == nil {
				t.Errorf("after clearing a returned slice the store returns %v", again)
			}
		})
	}
}

func TestIndexer_GetByKey(t *testing.T) {
	s := newTestIndexer(t)
	a, node := newPod("ns", "a", "1"), newPod("", "node", "1")
	mustAdd(t, s, a, node)
	for _, tc := range []struct {
		name   string
		key    string
		want   *corev1.Pod
		exists bool
	}{
		{name: "a namespaced key finds its object", key: "ns/a", want: a, exists: true},
		{name: "a cluster-scoped key finds its object", key: "node", want: node, exists: true},
		{name: "a missing key finds nothing", key: "ns/b"},
		{name: "a name without its namespace finds nothing", key: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := s.GetByKey(tc.key)
			if got != tc.want || ok != tc.exists {
				t.Errorf("GetByKey(%q) = %v, %v; want %v, %v", tc.key, got, ok, tc.want, tc.exists)
			}
		})
	}
}

// A Reader's Get by typed name finds the same objects however the name's
// strings were made: cut from the store's own key, cut from a longer
// string, cut around another separator, or strings of their own.
func TestReader_GetFindsANameWhateverItsStringsShare(t *testing.T) {
	s := newTestIndexer(t)
	a, node := newPod("ns", "a", "1"), newPod("", "node", "1")
	mustAdd(t, s, a, node)
	cut := func(text string, nsFrom, nsTo, nameFrom, nameTo int) object.ObjectName {
		return object.ObjectName{Namespace: text[nsFrom:nsTo], Name: text[nameFrom:nameTo]}
	}
	stored := s.ListKeys()
	slices.Sort(stored) // "node", "ns/a"
	for _, tc := range []struct {
		name string
		obj  object.ObjectName
		want *corev1.Pod
	}{
		{"cut from the store's key", cut(stored[1], 0, 2, 3, 4), a},
		{"cut from a longer string", cut("xns/ay", 1, 3, 4, 5), a},
		{"cut around a separator that is not '/'", cut("ns-a", 0, 2, 3, 4), a},
		{"strings of their own", object.ObjectName{Namespace: strings.Clone("ns"), Name: strings.Clone("a")}, a},
		{"cut from a key of another object", cut("ns/b", 0, 2, 3, 4), nil},
		{"cut so that '/' ends the namespace", cut("ns/a", 0, 3, 3, 4), nil},
		{"a cluster-scoped name", object.ObjectName{Name: stored[0]}, node},
		{"parts side by side without a separator", cut("nsa", 0, 2, 2, 3), a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NewReader(s).Get(tc.obj)
			if got != tc.want || ok != (tc.want != nil) {
				t.Errorf("Get(%#v) = %v, %v; want %v", tc.obj, got, ok, tc.want)
			}
		})
	}
}

func TestIndexer_ReserveKeepsWhatAStoreHolds(t *testing.T) {
	s := newTestIndexer(t)
	s.Reserve(1000) // empty: room is made
	a := newPod("ns", "a", "1", "app=web")
	mustAdd(t, s, a)
	s.Reserve(1000) // holds a: left as it is
	if got, ok := s.GetByKey("ns/a"); !ok || got != a || s.Len() != 1 {
		t.Fatalf("after Reserve on a store holding a: GetByKey = %v, %v; Len %d", got, ok, s.Len())
	}
	if got, err := s.ByIndex("app", "web"); err != nil || len(got) != 1 || got[0] != a {
		t.Fatalf("ByIndex(app, web) = %v, %v; want a", got, err)
	}
	if err := s.c.checkInvariants(len(s.c.indices)); err != nil {
		t.Fatal(err)
	}
}

// TestIndexer_PutKeepsTheWritersKeyAndAllocatesNothingInPlace checks the
// two things that make an informer's write and a worker's read cheap: after
// a Put the map holds the caller's key string (the one the informer hands
// on to the queue, so the worker's GetByKey compares pointers), and a Put
// that changes no index value updates the entry in place, allocating
// nothing.
func TestIndexer_PutKeepsTheFirstKeyAndAllocatesNothingInPlace(t *testing.T) {
	s := newTestIndexer(t)
	first := strings.Clone("ns/a")
	if stored, _, existed, err := s.PutKey(first, newPod("ns", "a", "1", "app=web")); err != nil || existed ||
		unsafe.StringData(stored) != unsafe.StringData(first) {
		t.Fatalf("PutKey of a new object = %q, %v, %v; want its own key string back", stored, existed, err)
	}
	storedKeys := func() []*byte { // the map's key and every index set's
		var out []*byte
		for k := range s.c.items {
			out = append(out, unsafe.StringData(k))
		}
		for _, idx := range s.c.indices[1:] {
			for _, set := range idx {
				for k := range set {
					out = append(out, unsafe.StringData(k))
				}
			}
		}
		return out
	}
	key := strings.Clone("ns/a") // a string of its own, as the informer builds per event
	next := newPod("ns", "a", "2", "app=web")
	stored, _, existed, err := s.PutKey(key, next)
	if err != nil || !existed || unsafe.StringData(stored) != unsafe.StringData(first) {
		t.Fatalf("PutKey of an update = %q, %v, %v; want the first write's key string", stored, existed, err)
	}
	for _, k := range storedKeys() {
		if k != unsafe.StringData(first) {
			t.Error("after an in-place Put the store holds another key string than the first write's")
		}
	}
	moved := newPod("ns", "a", "3", "app=db") // an index value changes: the entry is rewritten
	key = strings.Clone("ns/a")
	if stored, _, _, err := s.PutKey(key, moved); err != nil || unsafe.StringData(stored) != unsafe.StringData(first) {
		t.Fatalf("PutKey that moved the object in an index = %q, %v; want the first write's key string", stored, err)
	}
	for _, k := range storedKeys() {
		if k != unsafe.StringData(first) {
			t.Error("after a Put that moved the object in an index the store holds another key string than the first write's")
		}
	}
	if got, _ := s.ByIndex("app", "db"); len(got) != 1 || got[0] != moved {
		t.Errorf("ByIndex(app, db) = %v; want the moved pod", got)
	}
	if err := s.c.checkInvariants(len(s.c.indices)); err != nil {
		t.Fatal(err)
	}

	plain, err := New(Options[*corev1.Pod]{}) // only the namespace index: no index function allocates
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, plain, moved)
	if allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := plain.Put(key, moved); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("a Put changing no index value allocates %v times; want 0", allocs)
	}
}

// TestIndexer_TheNamespaceIndexIsBuiltAtItsFirstRead: a store nobody has
// asked by namespace keeps no namespace index; the first read builds it
// from the entries, writes keep it from then on, and a Replace after it
// builds its cache with it.
func TestIndexer_TheNamespaceIndexIsBuiltAtItsFirstRead(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, s, newPod("a", "p", "1"))
	mustAdd(t, s, newPod("a", "q", "2"))
	mustAdd(t, s, newPod("b", "p", "3"))
	if s.c.nsIndexed || len(s.c.byNS) != 0 {
		t.Fatalf("before any read by namespace the index holds %d values; want it not kept", len(s.c.byNS))
	}
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	inNS := func(ns string) []string {
		t.Helper()
		keys, err := s.IndexKeys(NamespaceIndex, ns)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		return keys
	}
	if got := inNS("a"); !slices.Equal(got, []string{"a/p", "a/q"}) {
		t.Errorf("first read of namespace a = %v; want a/p, a/q", got)
	}
	if !s.c.nsIndexed {
		t.Fatal("the first read did not keep the index")
	}
	mustAdd(t, s, newPod("b", "r", "4"))
	if _, existed := s.Remove("a/q", "5"); !existed {
		t.Fatal("Remove(a/q) found nothing")
	}
	if got := inNS("a"); !slices.Equal(got, []string{"a/p"}) {
		t.Errorf("after a delete, namespace a = %v; want a/p", got)
	}
	if got := inNS("b"); !slices.Equal(got, []string{"b/p", "b/r"}) {
		t.Errorf("after an add, namespace b = %v; want b/p, b/r", got)
	}
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if err := s.Replace([]*corev1.Pod{newPod("c", "p", "6")}, "6"); err != nil {
		t.Fatal(err)
	}
	if !s.c.nsIndexed {
		t.Error("a Replace after a read by namespace built a cache without the index")
	}
	if got := inNS("c"); !slices.Equal(got, []string{"c/p"}) {
		t.Errorf("after a Replace, namespace c = %v; want c/p", got)
	}
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestIndexer_ANamespaceThatShrinksGivesBackItsRoom: deleting most of a
// large namespace's objects, in an order that moves members around, keeps
// the rest listed by namespace, and the namespace index lets go of the
// room the peak needed.
func TestIndexer_ANamespaceThatShrinksGivesBackItsRoom(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ByIndex(NamespaceIndex, "big"); err != nil { // keep the index
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		mustAdd(t, s, newPod("big", fmt.Sprint("p", i), "1"))
	}
	mustAdd(t, s, newPod("small", "q", "1"))
	peak := cap(s.c.inNamespace("big"))
	for i := range n - 10 {
		key := fmt.Sprintf("big/p%d", i*7%n) // 7 and 1000 are coprime: each key once
		if _, ok := s.Remove(key, ""); !ok {
			t.Fatalf("Remove(%s) found nothing", key)
		}
	}
	keys, err := s.IndexKeys(NamespaceIndex, "big")
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := s.ByIndex(NamespaceIndex, "big")
	if len(keys) != s.Len()-1 || len(objs) != len(keys) {
		t.Fatalf("namespace big lists %d keys and %d objects; the store holds %d objects besides small/q", len(keys), len(objs), s.Len()-1)
	}
	for _, key := range keys {
		if _, ok := s.GetByKey(key); !ok {
			t.Errorf("namespace big lists %s, which the store does not hold", key)
		}
	}
	if got := cap(s.c.inNamespace("big")); got > peak/4 {
		t.Errorf("namespace big keeps room for %d entries after shrinking from %d to %d; want at most %d", got, n, len(keys), peak/4)
	}
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// A Reader's Get by typed name finds what GetByKey finds, namespaced or
// cluster-scoped, and allocates nothing for its key.
func TestReader_GetByNameAllocatesNothing(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	p := newPod("ns", "a", "1")
	mustAdd(t, s, p)
	cluster := newPod("", "node-pod", "1")
	mustAdd(t, s, cluster)
	r := NewReader(s)
	if got, ok := r.Get(object.ObjectName{Namespace: "ns", Name: "a"}); !ok || got != p {
		t.Fatalf("Get(ns/a) = %v, %v", got, ok)
	}
	if got, ok := r.Get(object.ObjectName{Name: "node-pod"}); !ok || got != cluster {
		t.Fatalf("Get(node-pod) = %v, %v", got, ok)
	}
	if _, ok := r.Get(object.ObjectName{Namespace: "ns", Name: "b"}); ok {
		t.Fatal("Get(ns/b) found an object")
	}
	long := object.ObjectName{Namespace: strings.Repeat("n", 200), Name: strings.Repeat("x", 200)} // beyond the stack buffer
	if _, ok := r.Get(long); ok {
		t.Fatal("Get of a long name found an object")
	}
	name := object.ObjectName{Namespace: "ns", Name: "a"}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, ok := r.Get(name); !ok {
			t.Fatal("not found")
		}
	}); allocs != 0 {
		t.Errorf("Get by name allocates %v times; want 0", allocs)
	}
}

// A Reader looks an index up as client-go's Indexer does: the keys under a
// value, the objects sharing a value with another, the values present; an
// unknown index is ErrNoIndex.
func TestReader_readsIndexesAsClientGosIndexer(t *testing.T) {
	s := newTestIndexer(t)
	a, b, c := newPod("ns", "a", "1", "tags=x,y"), newPod("ns", "b", "2", "tags=y"), newPod("ns", "c", "3", "app=web")
	for _, p := range []*corev1.Pod{a, b, c} {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(s)
	keys, err := r.IndexKeys("tags", "y")
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"ns/a", "ns/b"}) {
		t.Errorf("IndexKeys(tags, y) = %v, %v; want ns/a and ns/b", keys, err)
	}
	sharing, err := r.Index("tags", newPod("ns", "new", "9", "tags=x"))
	if err != nil || len(sharing) != 1 || sharing[0] != a {
		t.Errorf("Index(tags, a pod tagged x) = %v, %v; want a alone", sharing, err)
	}
	values, err := r.ListIndexFuncValues("tags")
	slices.Sort(values)
	if err != nil || !slices.Equal(values, []string{"x", "y"}) {
		t.Errorf("ListIndexFuncValues(tags) = %v, %v; want x and y", values, err)
	}
	for _, err := range []error{
		func() error { _, err := r.IndexKeys("none", "x"); return err }(),
		func() error { _, err := r.Index("none", a); return err }(),
		func() error { _, err := r.ListIndexFuncValues("none"); return err }(),
	} {
		if !errors.Is(err, ErrNoIndex) {
			t.Errorf("an unknown index: %v, want ErrNoIndex", err)
		}
	}
}
