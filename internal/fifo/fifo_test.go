package fifo

import (
	"slices"
	"testing"
)

func TestQueue_popsInPushOrderAcrossCompactions(t *testing.T) {
	var q Queue[int]
	next, want := 0, 0
	// Interleave bursts of pushes and pops so the live part moves to the
	// front of the array many times.
	for round := range 200 {
		for range round%7 + 1 {
			q.Push(next)
			next++
		}
		for range round % 5 {
			if q.Len() == 0 {
				break
			}
			if got := q.Front(); got != want {
				t.Fatalf("Front = %d, want %d", got, want)
			}
			if got := q.Pop(); got != want {
				t.Fatalf("Pop = %d, want %d", got, want)
			}
			want++
		}
		if q.Len() != next-want {
			t.Fatalf("Len = %d, want %d", q.Len(), next-want)
		}
	}
	if items := q.Items(); len(items) != next-want || (len(items) > 0 && items[0] != want) {
		t.Fatalf("Items = %v, want %d.. (%d values)", items, want, next-want)
	}
	*q.At(0) = -1
	if q.Front() != -1 {
		t.Fatalf("At(0) did not update the front in place")
	}
	q.Reset()
	if q.Len() != 0 || len(q.Items()) != 0 {
		t.Fatalf("after Reset, Len = %d", q.Len())
	}
}

func TestQueue_steadyPushAndPopKeepsOneArray(t *testing.T) {
	var q Queue[string]
	for i := range 64 {
		q.Push(string(rune('a' + i%26)))
	}
	for range 1000 { // the array grows to about twice the live part once
		q.Push(q.Pop())
	}
	c := q.Cap()
	allocs := testing.AllocsPerRun(1000, func() {
		q.Push(q.Pop())
	})
	if allocs != 0 || q.Cap() != c || c > 4*64 {
		t.Fatalf("steady state: %.1f allocations per push and pop, capacity %d then %d; want none and the same array", allocs, c, q.Cap())
	}
	if got := slices.Clone(q.Items()); len(got) != 64 {
		t.Fatalf("Len %d after steady state, want 64", len(got))
	}
}
