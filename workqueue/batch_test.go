package workqueue

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
)

// TestQueue_AddBatchIsAddWithPriorityForEachKeyInOrder feeds two queues the
// same keys, one key at a time and in batches (more than one lock's worth,
// with duplicates, keys being processed and a key raised to a higher
// priority), and wants the same keys handed out in the same order and the
// same adds counted.
func TestQueue_AddBatchIsAddWithPriorityForEachKeyInOrder(t *testing.T) {
	regOne, regBatch := prometheus.NewRegistry(), prometheus.NewRegistry()
	one := newTestQueue(t, Options[string]{Name: "one", Registerer: regOne})
	batch := newTestQueue(t, Options[string]{Name: "batch", Registerer: regBatch})
	var first []string
	for n := range 100 {
		first = append(first, fmt.Sprintf("ns%d/k%d", n%7, n))
	}
	second := append([]string{"ns0/k0", "ns1/k1", "ns0/k0"}, first[90:]...)
	feed := []struct {
		keys []string
		prio int
	}{{first, LowPriority}, {second, 0}, {[]string{"ns3/k3", "ns9/late"}, 5}}
	for _, q := range []*Queue[string]{one, batch} {
		// two keys in process, so that the batches re-add them
		for _, want := range []string{"ns1/k1", "ns2/k2"} {
			q.AddWithPriority(want, 9)
			get(want)(t, q)
		}
	}
	for _, f := range feed {
		for _, k := range f.keys {
			one.AddWithPriority(k, f.prio)
		}
		batch.AddBatch(f.keys, f.prio)
		if err := batch.core.checkInvariants(batch.flowKey); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(q *Queue[string]) []string {
		q.Done("ns1/k1")
		q.Done("ns2/k2")
		var out []string
		for q.Len() > 0 {
			k, _ := q.Get()
			out = append(out, k)
			q.Done(k)
		}
		return out
	}
	gotOne, gotBatch := drain(one), drain(batch)
	if len(gotOne) != 101 || !slices.Equal(gotOne, gotBatch) {
		t.Errorf("one by one handed out %d keys, in batches %d; they differ:\n%q\n%q", len(gotOne), len(gotBatch), gotOne, gotBatch)
	}
	if a, b := value(t, regOne, "workqueue_adds_total", "one"), value(t, regBatch, "workqueue_adds_total", "batch"); a != b || a == 0 {
		t.Errorf("adds counted one by one %v, in batches %v; want the same", a, b)
	}
}

func TestQueue_AddBatchWakesOneWaitingWorkerPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				mu.Lock()
				got = append(got, k)
				mu.Unlock()
			})
		}
		synctest.Wait() // every worker waits in Get
		q.AddBatch([]string{"a", "b"}, 0)
		synctest.Wait()
		mu.Lock()
		slices.Sort(got)
		if !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("after a batch of two keys, workers got %q; want a and b", got)
		}
		mu.Unlock()
		q.AddBatch([]string{"c"}, 0)
		wg.Wait()
		if len(got) != 3 {
			t.Errorf("after a third key, workers got %q", got)
		}
	})
}

func TestQueue_AddBatchAfterShutDownIsIgnored(t *testing.T) {
	q := newTestQueue(t, Options[string]{})
	q.ShutDown()
	q.AddBatch([]string{"a", "b"}, 0)
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d after a batch added once shut down, want 0", n)
	}
}
