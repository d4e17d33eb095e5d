package workqueue

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/internal/peak"
)

// TestQueue_MapsABurstGrewAreRebuiltOnceDrained checks that a burst of keys
// (an initial list) does not leave the queue's maps at their peak size: once
// the keys are processed and the queue has stayed small for a while, every
// map keyed by key (keys, re-added, and the metrics' stamps)
// has been rebuilt, and keys re-added while processing still come back once.
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
	for name, tr := range map[string]*peak.Tracker{"keys": &c.keysPeak,
		"readded": &c.readdedPeak, "started": &c.stamps.peak} {
		if tr.Peak() >= peak.MinPeak {
			t.Errorf("%s: peak %d after the burst drained; want the map rebuilt", name, tr.Peak())
		}
	}
	if err := c.checkInvariants(q.flowKey); err != nil {
		t.Fatal(err)
	}
}
