package fifo

import (
	"runtime"
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

// A backlog building up (more pushes than pops) allocates about twice
// its final array on the way: the array doubles (append would grow a large
// one by a quarter, about five times the final size in all).
func TestQueue_aGrowingBacklogDoublesItsArray(t *testing.T) {
	const n = 1 << 17
	var q Queue[int64]
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		q.Push(int64(i))
		if i%5 == 4 {
			q.Pop()
		}
	}
	runtime.ReadMemStats(&after)
	final := int64(q.Cap()) * 8
	if got := int64(after.TotalAlloc - before.TotalAlloc); got > 3*final || q.Cap() < q.Len() {
		t.Errorf("a backlog of %d values allocated %d bytes for a final array of %d; want at most three times it", q.Len(), got, final)
	}
	for want := int64(n / 5); q.Len() > 0; want++ { // the pops took the first fifth; the rest come in push order
		if v := q.Pop(); v != want {
			t.Fatalf("Pop = %d, want %d", v, want)
		}
	}
}
