package store

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/object"
)

// fuzzIndexers are the index functions FuzzIndexer may add: single-valued,
// multi-valued, and both failing on poisoned pods.
var fuzzIndexers = []struct {
	name string
	fn   IndexFunc[*corev1.Pod]
}{{"app", byLabel("app")}, {"tags", byTags}, {"app2", byLabel("app")}}

// model is the naive reference: a map, the names of the indexes, and linear
// scans.
type model struct {
	items map[string]*corev1.Pod
	funcs map[string]IndexFunc[*corev1.Pod]
	rv    string
	gen   int            // relists begun
	genOf map[string]int // the relist generation each item was written in
	// nsRead: the namespace index was read (the store keeps it from then
	// on); compare reads it only after a step that does, so that writes,
	// relists and index additions are fuzzed with and without it.
	nsRead bool
}

// put records a write of p in the current relist generation.
func (m *model) put(p *corev1.Pod) {
	m.items[modelKey(p)] = p
	if m.genOf == nil {
		m.genOf = map[string]int{}
	}
	m.genOf[modelKey(p)] = m.gen
}

func (m *model) valuesOf(name string, p *corev1.Pod) ([]string, error) { return m.funcs[name](p) }

// accepts reports whether every index function accepts all of pods.
func (m *model) accepts(pods ...*corev1.Pod) bool {
	for _, fn := range m.funcs {
		for _, p := range pods {
			if _, err := fn(p); err != nil {
				return false
			}
		}
	}
	return true
}

func (m *model) advance(next string) {
	cur, errC := strconv.ParseUint(m.rv, 10, 64)
	nxt, errN := strconv.ParseUint(next, 10, 64)
	if next != "" && (errC != nil || errN != nil || nxt > cur) {
		m.rv = next
	}
}

// scan returns the sorted keys whose values in index name include value.
func (m *model) scan(name, value string) []string {
	var out []string
	for key, p := range m.items {
		if vals, _ := m.valuesOf(name, p); slices.Contains(vals, value) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// modelKey is the key the model expects for p.
func modelKey(p *corev1.Pod) string {
	if p.Namespace == "" {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}

// fuzzReader hands out the bytes of a fuzz input, then zeros.
type fuzzReader []byte

func (r *fuzzReader) next() byte {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return b
}

func (r *fuzzReader) rv() string {
	switch b := r.next(); b % 8 {
	case 0:
		return ""
	case 1:
		return fmt.Sprint("x", b%3) // opaque: cannot be ordered
	default:
		return strconv.Itoa(int(b))
	}
}

// pod decodes a pod in one of three namespaces (one cluster-scoped) with one
// of four names, an app label, up to three tags, sometimes poisoned.
func (r *fuzzReader) pod() *corev1.Pod {
	b, l := r.next(), r.next()
	ns := []string{"a", "b", ""}[b%3]
	kv := []string{"app=" + []string{"x", "y", ""}[l%3]}
	if tags := l >> 2 & 7; tags != 0 {
		var ts []string
		for i := range 3 {
			if tags&(1<<i) != 0 {
				ts = append(ts, fmt.Sprint("t", i))
			}
		}
		kv = append(kv, "tags="+strings.Join(ts, ","))
	}
	if l>>5 == 7 {
		kv = append(kv, "poison=true")
	}
	return newPod(ns, fmt.Sprint("p", b/3%4), r.rv(), kv...)
}

func FuzzIndexer(f *testing.F) {
	f.Add([]byte{0, 1, 4, 10, 0, 4, 9, 11})
	f.Add([]byte{5, 0, 0, 1, 8, 3, 2, 0, 1, 0, 4, 6, 5, 1, 2, 3, 7, 20})
	f.Add([]byte{5, 1, 0, 0, 255, 30, 3, 3, 0, 1, 5, 1, 2, 2, 9, 2, 5, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := New(Options[*corev1.Pod]{})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{items: map[string]*corev1.Pod{}, funcs: map[string]IndexFunc[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]}}
		r := fuzzReader(data)
		for step := 0; len(r) > 0 && step < 200; step++ {
			desc := fuzzStep(t, s, m, &r)
			if err := s.checkInvariants(); err != nil {
				t.Fatalf("step %d (%s): invariants: %v", step, desc, err)
			}
			compare(t, s, m, fmt.Sprintf("step %d (%s)", step, desc))
		}
	})
}

// fuzzStep decodes and applies one operation to the store and the model,
// checks the error, and describes the operation.
func fuzzStep(t *testing.T, s *Indexer[*corev1.Pod], m *model, r *fuzzReader) string {
	switch op := r.next() % 10; op {
	case 9:
		m.nsRead = true
		return "read by namespace"
	case 6:
		p := r.pod()
		key, kerr := object.MetaNamespaceKeyFunc(p)
		if kerr != nil {
			return "put of an object without a key: skipped"
		}
		_, _, err := s.Put(key, p)
		if m.accepts(p) {
			m.put(p)
			m.advance(p.ResourceVersion)
		}
		checkErr(t, err, !m.accepts(p), ErrIndexFunc)
		return fmt.Sprintf("put %s rv=%q", key, p.ResourceVersion)
	case 7:
		s.BeginRelist()
		m.gen++
		return "begin relist"
	case 8:
		rv := r.rv()
		gone := s.EndRelist(rv)
		want := 0
		for key := range m.items {
			if m.genOf[key] != m.gen {
				delete(m.items, key)
				want++
			}
		}
		if len(gone) != want {
			t.Fatalf("EndRelist removed %d objects, the model %d", len(gone), want)
		}
		m.advance(rv)
		return fmt.Sprintf("end relist rv=%q", rv)
	case 0, 1:
		p := r.pod()
		err := map[byte]func(*corev1.Pod) error{0: s.Add, 1: s.Update}[op](p)
		if ok := m.accepts(p); ok {
			m.put(p)
			m.advance(p.ResourceVersion)
		}
		checkErr(t, err, !m.accepts(p), ErrIndexFunc)
		return fmt.Sprintf("write %s/%s %v rv=%q", p.Namespace, p.Name, p.Labels, p.ResourceVersion)
	case 2:
		p := r.pod()
		checkErr(t, s.Delete(p), false, nil)
		delete(m.items, modelKey(p))
		m.advance(p.ResourceVersion)
		return fmt.Sprintf("delete %s/%s rv=%q", p.Namespace, p.Name, p.ResourceVersion)
	case 3:
		return replaceStep(t, s, m, r)
	case 4:
		rv := r.rv()
		s.Bookmark(rv)
		m.advance(rv)
		return fmt.Sprintf("bookmark %q", rv)
	default:
		ix := fuzzIndexers[int(r.next())%len(fuzzIndexers)]
		err := s.AddIndexers(Indexers[*corev1.Pod]{ix.name: ix.fn})
		_, dup := m.funcs[ix.name]
		if dup {
			checkErr(t, err, true, ErrDuplicateIndex)
			return "add duplicate index " + ix.name
		}
		fails := !(&model{funcs: map[string]IndexFunc[*corev1.Pod]{ix.name: ix.fn}}).accepts(slices.Collect(mapValues(m.items))...)
		checkErr(t, err, fails, ErrIndexFunc)
		if !fails {
			m.funcs[ix.name] = ix.fn
		}
		return "add index " + ix.name
	}
}

func replaceStep(t *testing.T, s *Indexer[*corev1.Pod], m *model, r *fuzzReader) string {
	pods := make([]*corev1.Pod, r.next()%5)
	for i := range pods {
		pods[i] = r.pod()
	}
	rv := r.rv()
	fails := !m.accepts(pods...)
	checkErr(t, s.Replace(pods, rv), fails, ErrIndexFunc)
	if !fails {
		m.items = map[string]*corev1.Pod{}
		for _, p := range pods {
			m.put(p)
		}
		if rv == "" {
			for _, p := range pods {
				m.advance(p.ResourceVersion)
			}
		}
		m.advance(rv)
	}
	return fmt.Sprintf("replace with %d pods, rv=%q", len(pods), rv)
}

func mapValues[V any](m map[string]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func checkErr(t *testing.T, err error, wantErr bool, sentinel error) {
	t.Helper()
	if wantErr != (err != nil) || (wantErr && !errors.Is(err, sentinel)) {
		t.Fatalf("err = %v, want error %v (%v)", err, wantErr, sentinel)
	}
}

// compare checks every read of s against the model.
func compare(t *testing.T, s *Indexer[*corev1.Pod], m *model, at string) {
	t.Helper()
	if got, want := sorted(s.ListKeys()), sorted(slices.Collect(mapKeys(m.items))); !slices.Equal(got, want) {
		t.Fatalf("%s: keys = %v, want %v", at, got, want)
	}
	for key, p := range m.items {
		if got, ok := s.GetByKey(key); !ok || got != p {
			t.Fatalf("%s: GetByKey(%q) = %p, %v; want %p", at, key, got, ok, p)
		}
	}
	if got := s.ResourceVersion(); got != m.rv {
		t.Fatalf("%s: ResourceVersion = %q, want %q", at, got, m.rv)
	}
	for name := range m.funcs {
		if name == NamespaceIndex && !m.nsRead {
			continue
		}
		values, err := s.ListIndexFuncValues(name)
		if err != nil {
			t.Fatalf("%s: ListIndexFuncValues(%q): %v", at, name, err)
		}
		universe := []string{"", "a", "b", "x", "y", "t0", "t1", "t2"}
		for _, v := range values {
			if !slices.Contains(universe, v) {
				t.Fatalf("%s: index %q lists value %q no pod can carry", at, name, v)
			}
		}
		for _, v := range universe {
			want := m.scan(name, v)
			got, err := s.IndexKeys(name, v)
			if err != nil || !slices.Equal(sorted(got), want) {
				t.Fatalf("%s: IndexKeys(%q, %q) = %v, %v; want %v", at, name, v, got, err, want)
			}
			if slices.Contains(values, v) != (len(want) > 0) {
				t.Fatalf("%s: index %q lists values %v; value %q carried by %v", at, name, values, v, want)
			}
		}
	}
}
