package store

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIndexer_ResourceVersion(t *testing.T) {
	add := func(rv string) func(*Indexer[*corev1.Pod]) error {
		return func(s *Indexer[*corev1.Pod]) error { return s.Add(newPod("ns", "a", rv)) }
	}
	del := func(rv string) func(*Indexer[*corev1.Pod]) error {
		return func(s *Indexer[*corev1.Pod]) error { return s.Delete(newPod("ns", "a", rv)) }
	}
	replace := func(rv string, itemRVs ...string) func(*Indexer[*corev1.Pod]) error {
		return func(s *Indexer[*corev1.Pod]) error {
			var pods []*corev1.Pod
			for i, r := range itemRVs {
				pods = append(pods, newPod("ns", string(rune('a'+i)), r))
			}
			return s.Replace(pods, rv)
		}
	}
	bookmark := func(rv string) func(*Indexer[*corev1.Pod]) error {
		return func(s *Indexer[*corev1.Pod]) error { s.Bookmark(rv); return nil }
	}
	type op = func(*Indexer[*corev1.Pod]) error
	for _, tc := range []struct {
		name string
		ops  []op
		want string
	}{
		{name: "a new store reflects no version", want: ""},
		{name: "a write advances the version", ops: []op{add("5")}, want: "5"},
		{name: "versions compare as numbers, not strings", ops: []op{add("9"), add("10")}, want: "10"},
		{name: "an older write does not move the version back", ops: []op{add("10"), add("9")}, want: "10"},
		{name: "a delete advances the version", ops: []op{add("5"), del("7")}, want: "7"},
		{name: "a delete of a missing key still advances the version", ops: []op{del("7")}, want: "7"},
		{name: "a bookmark advances the version", ops: []op{add("5"), bookmark("8")}, want: "8"},
		{name: "an older bookmark is ignored", ops: []op{add("5"), bookmark("4")}, want: "5"},
		{name: "a replace advances to the list version", ops: []op{add("5"), replace("20", "3")}, want: "20"},
		{name: "an older replace does not move the version back", ops: []op{add("50"), replace("20", "3")}, want: "50"},
		{name: "a replace without a version uses its newest item", ops: []op{replace("", "3", "12", "7")}, want: "12"},
		{name: "a replace without a version applies its items in order", ops: []op{add("9"), replace("", "x1", "5")}, want: "5"},
		{name: "an empty version says nothing", ops: []op{add("5"), add(""), bookmark("")}, want: "5"},
		{name: "a version that is not a number wins, as the later one", ops: []op{add("5"), add("x1")}, want: "x1"},
		{name: "a number after an opaque version wins, as the later one", ops: []op{add("x1"), add("3")}, want: "3"},
		{name: "a failed write does not advance the version", ops: []op{add("5"), func(s *Indexer[*corev1.Pod]) error {
			_ = s.Add(newPod("ns", "b", "9", "poison=true"))
			return nil
		}}, want: "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestIndexer(t)
			for _, op := range tc.ops {
				if err := op(s); err != nil {
					t.Fatal(err)
				}
			}
			if got := s.ResourceVersion(); got != tc.want {
				t.Errorf("ResourceVersion = %q, want %q", got, tc.want)
			}
		})
	}
}
