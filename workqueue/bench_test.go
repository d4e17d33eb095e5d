package workqueue_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

var benchKeys = func() []string {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "default/pod-" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkQueue_AddGetDone measures one round: 2 producers add 10,000
// distinct keys while 2 workers Get and Done them; the queue is then shut
// down and the round ends when the workers have emptied it.
func BenchmarkQueue_AddGetDone(b *testing.B) {
	keys := benchKeys[:10_000]
	b.ReportAllocs()
	for b.Loop() {
		q, err := workqueue.New(workqueue.Options[string]{})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					q.Done(k)
				}
			})
		}
		var prod sync.WaitGroup
		for p := range 2 {
			prod.Go(func() {
				for _, k := range keys[p*len(keys)/2 : (p+1)*len(keys)/2] {
					q.Add(k)
				}
			})
		}
		prod.Wait()
		q.ShutDown()
		wg.Wait()
	}
}

// BenchmarkQueue_AddAfter measures AddAfter with 100,000 keys pending: each
// op re-adds a pending key with a new delay (the earlier time wins). The
// clock stops only once the delay goroutine has taken in every call.
func BenchmarkQueue_AddAfter(b *testing.B) {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		b.Fatal(err)
	}
	defer q.ShutDown()
	for i, k := range benchKeys {
		q.AddAfter(k, time.Hour+time.Duration(i)*time.Microsecond)
	}
	settle(b, q)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		q.AddAfter(benchKeys[i%len(benchKeys)], time.Hour+time.Duration(i*7919%len(benchKeys))*time.Microsecond)
	}
	settle(b, q)
}

// settle returns once the delay goroutine has handled every earlier
// AddAfter: its intake is first in, first out, so a sentinel with a tiny
// delay comes out of Get only after all of them.
func settle(b *testing.B, q *workqueue.Queue[string]) {
	q.AddAfter("sentinel", time.Nanosecond)
	if k, _ := q.Get(); k != "sentinel" {
		b.Fatalf("Get() = %q, want the sentinel", k)
	}
	q.Done("sentinel")
}

// BenchmarkQueue_State is State of the last key of a deep queue (300,000
// keys in 50 flows, the debug page's explanation of a key at the back),
// taken with the queue's lock held: its cost is what the queue's adds and
// gets wait for while the page asks.
func BenchmarkQueue_State(b *testing.B) {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		b.Fatal(err)
	}
	defer q.ShutDown()
	var last string
	for i := range 300_000 {
		last = "ns-" + strconv.Itoa(i%50) + "/obj-" + strconv.Itoa(i)
		q.Add(last)
	}
	for b.Loop() {
		if st := q.State(last); !st.Queued || st.Position != 299_999 {
			b.Fatalf("State(%s) = %+v, want queued last", last, st)
		}
	}
}
