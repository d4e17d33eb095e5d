package workqueue

import (
	"slices"
	"testing"
	"time"
)

// The element seq wraps around back to 1, skipping the two values that
// mark re-added (0) and processing (processingSeq) keys; keys queued, moved
// up, re-added and drained across the wrap keep the invariants.
func TestCore_seqWrapsAroundSkippingItsMarks(t *testing.T) {
	var c core[string]
	c.init(false, DefaultAgingStep, DefaultQuantum, 0)
	flowOf := func(k string) string { return k[:1] }
	var at time.Time
	check := func(when string) {
		t.Helper()
		if err := c.checkInvariants(flowOf); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	c.seq = processingSeq - 3
	for _, k := range []string{"a1", "a2", "b1"} {
		c.add(k, 0, flowOf(k), at)
	}
	check("three keys across the wrap")
	if c.seq != 1 {
		t.Fatalf("seq after three pushes from processingSeq-3 = %d, want 1 (processingSeq skipped)", c.seq)
	}
	c.add("a1", 5, "a", at) // moves up: a new element, seq 2
	check("a1 moved up")
	if k, _, _ := c.get(at); k != "a1" {
		t.Fatalf("get = %q, want a1 (priority 5)", k)
	}
	if e := c.keys["a1"]; e.seq != processingSeq {
		t.Fatalf("a1 handed out: seq %d, want processingSeq", e.seq)
	}
	c.add("a1", 0, "a", at) // re-added while processing
	check("a1 re-added")
	if _, requeued, ok := c.done("a1", "", at); !requeued || !ok {
		t.Fatalf("done(a1) = requeued %v, ok %v; want both", requeued, ok)
	}
	check("a1 requeued")
	var got []string
	for c.queued > 0 {
		k, _, _ := c.get(at)
		c.done(k, "", at)
		got = append(got, k)
		check("drain")
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a1", "a2", "b1"}) || !c.idle() {
		t.Fatalf("drained %v, idle %v; want a1, a2, b1 once each and idle", got, c.idle())
	}
}
