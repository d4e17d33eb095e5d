package workqueue

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/internal/peak"
)

// TestQueue_MapsABurstGrewAreRebuiltOnceDrained checks that a burst of keys
// (an initial list) does not leave the queue's maps at their peak size: once
// the keys are processed and the queue has stayed small for a while, every
// map keyed by key (keys, re-added) has been rebuilt, the metrics' started
// stamps dropped their slots,, and keys re-added while processing still come back once.
func TestQueue_MapsABurstGrewAreRebuiltOnceDrained(t *testing.T) {
	q := newTestQueue(t, Options[int]{Name: "burst", Registerer: prometheus.NewRegistry()})
	n := 2 * peak.MinPeak
	for i := range n {
		q.Add(i)
	}
	for i := range n { // everything processing at once: processing and started reach n
		if k, shutdown := q.Get(); shutdown || k != i {
			t.Fatalf("Get = %d, %v; want %d", k, shutdown, i)
		}
	}
	for i := range n { // every key re-added while processing: readded reaches n
		q.Add(i)
	}
	for i := range n {
		q.Done(i)
	}
	for i := range n {
		k, shutdown := q.Get()
		if shutdown || k != i {
			t.Fatalf("re-added: Get = %d, %v; want %d", k, shutdown, i)
		}
		q.Done(k)
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d after every key was processed twice; want 0", q.Len())
	}
	for i := range n / 2 { // a small steady state: one key at a time, re-added while processing
		k := n + i
		q.Add(k)
		if got, _ := q.Get(); got != k {
			t.Fatalf("Get = %d; want %d", got, k)
		}
		q.Add(k)
		q.Done(k)
		if got, _ := q.Get(); got != k {
			t.Fatalf("re-added: Get = %d; want %d", got, k)
		}
		q.Done(k)
	}
	c := &q.core
	for name, tr := range map[string]*peak.Tracker{"keys": &c.keysPeak, "readded": &c.readdedPeak} {
		if tr.Peak() >= peak.MinPeak {
			t.Errorf("%s: peak %d after the burst drained; want the map rebuilt", name, tr.Peak())
		}
	}
	if len(c.stamps.procs) > maxIdleProcs {
		t.Errorf("the started stamps keep %d slots after the burst drained; want at most %d", len(c.stamps.procs), maxIdleProcs)
	}
	if err := c.checkInvariants(q.flowKey); err != nil {
		t.Fatal(err)
	}
}

// TestQueue_ReserveKeepsWhatTheQueueHoldsAndGivesTheRoomBack checks that
// Reserve, which rebuilds the keys map with room for a burst, keeps every
// key in its state (queued in order, processing, re-added), and that the
// room counts as a peak: once the burst drained, the map is rebuilt small.
func TestQueue_ReserveKeepsWhatTheQueueHoldsAndGivesTheRoomBack(t *testing.T) {
	q := newTestQueue(t, Options[int]{Name: "reserve"})
	q.Add(1)
	q.Add(2)
	q.Add(3)
	if k, _ := q.Get(); k != 1 {
		t.Fatalf("Get = %d; want 1", k)
	}
	q.Add(1) // re-added while processing
	n := 2 * peak.MinPeak
	q.Reserve(n)
	c := &q.core
	if got := c.keysPeak.Peak(); got < n {
		t.Fatalf("keys peak %d after Reserve(%d); want the room counted", got, n)
	}
	if err := c.checkInvariants(q.flowKey); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		q.Add(100 + i)
	}
	q.Done(1) // 1 goes back, behind the burst
	want := []int{2, 3}
	for i := range n {
		want = append(want, 100+i)
	}
	want = append(want, 1)
	for _, w := range want {
		k, shutdown := q.Get()
		if shutdown || k != w {
			t.Fatalf("Get = %d, %v; want %d", k, shutdown, w)
		}
		q.Done(k)
	}
	for i := range n / 2 { // a small steady state
		q.Add(i)
		if k, _ := q.Get(); k != i {
			t.Fatalf("Get = %d; want %d", k, i)
		}
		q.Done(i)
	}
	if got := c.keysPeak.Peak(); got >= peak.MinPeak {
		t.Errorf("keys peak %d after the burst drained; want the map rebuilt", got)
	}
	q.Reserve(-1) // nothing to make room for: left as it is
	if err := c.checkInvariants(q.flowKey); err != nil {
		t.Fatal(err)
	}
	q.ShutDown()
	q.Reserve(n) // a queue that shut down makes no room
	if got := c.keysPeak.Peak(); got >= peak.MinPeak {
		t.Errorf("keys peak %d after Reserve on a shut-down queue; want no room made", got)
	}
}
