package store

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errPoison is what the test index functions return for an object labelled
// poison=true.
var errPoison = errors.New("poisoned object")

// newPod returns a pod; labels come as "k=v" pairs.
func newPod(ns, name, rv string, kv ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
	return p
}

// byLabel indexes a pod by the value of one label (no value without it)
// and fails on poisoned pods.
func byLabel(key string) IndexFunc[*corev1.Pod] {
	return func(p *corev1.Pod) ([]string, error) {
		if p.Labels["poison"] == "true" {
			return nil, errPoison
		}
		if v, ok := p.Labels[key]; ok {
			return []string{v}, nil
		}
		return nil, nil
	}
}

// byTags indexes a pod under each comma-separated value of its "tags" label:
// a multi-valued index.
func byTags(p *corev1.Pod) ([]string, error) {
	if p.Labels["poison"] == "true" {
		return nil, errPoison
	}
	if p.Labels["tags"] == "" {
		return nil, nil
	}
	return strings.Split(p.Labels["tags"], ","), nil
}

// newTestIndexer returns a store with the "app" and "tags" indexes.
func newTestIndexer(t testing.TB) *Indexer[*corev1.Pod] {
	t.Helper()
	s, err := New(Options[*corev1.Pod]{Indexers: Indexers[*corev1.Pod]{"app": byLabel("app"), "tags": byTags}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// mustAdd adds pods and fails the test on error.
func mustAdd(t testing.TB, s *Indexer[*corev1.Pod], pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := s.Add(p); err != nil {
			t.Fatalf("Add(%s/%s): %v", p.Namespace, p.Name, err)
		}
	}
}

// keys returns the sorted keys of pods.
func keys(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		if p.Namespace == "" {
			out = append(out, p.Name)
		} else {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// snapshot is everything observable about a store, for before/after checks.
type snapshot struct {
	keys   []string
	rv     string
	values map[string][]string // index name -> sorted values
}

func takeSnapshot(t testing.TB, s *Indexer[*corev1.Pod]) snapshot {
	t.Helper()
	if err := s.checkInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	snap := snapshot{keys: sorted(s.ListKeys()), rv: s.ResourceVersion(), values: map[string][]string{}}
	for _, name := range s.funcs.Load().names {
		vals, err := s.ListIndexFuncValues(name)
		if err != nil {
			t.Fatalf("ListIndexFuncValues(%q): %v", name, err)
		}
		snap.values[name] = sorted(vals)
	}
	return snap
}

func (a snapshot) equal(b snapshot) bool {
	if !slices.Equal(a.keys, b.keys) || a.rv != b.rv || len(a.values) != len(b.values) {
		return false
	}
	for name, vals := range a.values {
		if !slices.Equal(vals, b.values[name]) {
			return false
		}
	}
	return true
}
