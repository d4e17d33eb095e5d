package store

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestPut_returnsTheObjectItReplacedAndRefusesAKeyThatIsNotTheObjects(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := newPod("ns", "a", "1"), newPod("ns", "a", "2")
	if old, existed, err := s.Put("ns/a", a1); err != nil || existed || old != nil {
		t.Fatalf("first Put = %v, %v, %v; want nothing replaced", old, existed, err)
	}
	if old, existed, err := s.Put("ns/a", a2); err != nil || !existed || old != a1 {
		t.Fatalf("second Put = %v, %v, %v; want a1 replaced", old, existed, err)
	}
	for _, key := range []string{"ns/b", "a", "other/a", "ns/a/", "ns//a", ""} {
		if _, _, err := s.Put(key, newPod("ns", "a", "3")); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Put(%q, ns/a) = %v, want ErrInvalidKey", key, err)
		}
	}
	if got, _ := s.GetByKey("ns/a"); got != a2 {
		t.Errorf("after refused Puts the store holds %v, want a2", got)
	}
	if got := s.ResourceVersion(); got != "2" {
		t.Errorf("ResourceVersion = %q, want 2", got)
	}
	if old, existed := s.Remove("ns/a", "5"); !existed || old != a2 {
		t.Errorf("Remove = %v, %v; want a2", old, existed)
	}
	if _, existed := s.Remove("ns/a", "6"); existed {
		t.Error("a second Remove found the object again")
	}
	if s.Len() != 0 || s.ResourceVersion() != "6" {
		t.Errorf("after Remove: %d objects at %q, want 0 at 6", s.Len(), s.ResourceVersion())
	}
	if err := s.checkInvariants(); err != nil {
		t.Error(err)
	}
}

func TestPut_keepsIndexesRightWhenAnObjectMovesBetweenValues(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{Indexers: Indexers[*corev1.Pod]{"node": func(p *corev1.Pod) ([]string, error) {
		return []string{p.Spec.NodeName}, nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p := func(rv, node string) *corev1.Pod {
		o := newPod("ns", "a", rv)
		o.Spec.NodeName = node
		return o
	}
	for _, o := range []*corev1.Pod{p("1", "n1"), p("2", "n1"), p("3", "n2"), p("4", "n2")} {
		if _, _, err := s.Put("ns/a", o); err != nil {
			t.Fatal(err)
		}
		if err := s.checkInvariants(); err != nil {
			t.Fatalf("after rv %s: %v", o.ResourceVersion, err)
		}
	}
	if got, _ := s.ByIndex("node", "n1"); len(got) != 0 {
		t.Errorf("node n1 still lists %d objects", len(got))
	}
	if got, _ := s.ByIndex("node", "n2"); len(got) != 1 || got[0].ResourceVersion != "4" {
		t.Errorf("node n2 lists %v, want the object at rv 4", got)
	}
}

func TestEndRelist_removesExactlyWhatTheRelistDidNotWrite(t *testing.T) {
	s, err := New(Options[*corev1.Pod]{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "gone", "rewritten"} {
		if err := s.Add(newPod("ns", name, "1")); err != nil {
			t.Fatal(err)
		}
	}
	s.BeginRelist()
	if _, _, err := s.Put("ns/kept", newPod("ns", "kept", "2")); err != nil {
		t.Fatal(err)
	}
	s.BeginRelist() // the first relist failed halfway: only the second counts
	for _, name := range []string{"kept", "new"} {
		if _, _, err := s.Put("ns/"+name, newPod("ns", name, "3")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(newPod("ns", "rewritten", "4")); err != nil { // any write counts
		t.Fatal(err)
	}
	gone := s.EndRelist("10")
	if len(gone) != 1 || gone[0].Key != "ns/gone" || gone[0].Object.ResourceVersion != "1" {
		t.Errorf("EndRelist removed %v, want ns/gone at rv 1", gone)
	}
	keys := s.ListKeys()
	slices.Sort(keys)
	if want := []string{"ns/kept", "ns/new", "ns/rewritten"}; !slices.Equal(keys, want) {
		t.Errorf("after the relist: %q, want %q", keys, want)
	}
	if got := s.ResourceVersion(); got != "10" {
		t.Errorf("ResourceVersion = %q, want the list's 10", got)
	}
	if err := s.checkInvariants(); err != nil {
		t.Error(err)
	}
}
