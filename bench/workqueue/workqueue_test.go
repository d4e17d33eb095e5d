// Package workqueue_test runs ctrlkit's work queue and client-go's side by
// side on the same work. Each benchmark has a /ctrlkit and a /client-go
// sub-benchmark; cmd/benchtable pairs them up.
package workqueue_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
	cgworkqueue "k8s.io/client-go/util/workqueue"
)

// queue is the part both queues share that the benchmarks use. Both are
// built the way a controller builds them: rate limiting with the default
// controller limiter, no metrics.
type queue interface {
	Add(k string)
	AddAfter(k string, d time.Duration)
	Get() (k string, shutdown bool)
	Done(k string)
	ShutDown()
}

func newCtrlkit(b *testing.B) queue {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		b.Fatal(err)
	}
	return q
}

func newClientGo(*testing.B) queue {
	return cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
}

var sides = []struct {
	name string
	new  func(*testing.B) queue
}{
	{"ctrlkit", newCtrlkit},
	{"client-go", newClientGo},
}

var keys = func() []string {
	ks := make([]string, 100_000)
	for i := range ks {
		ks[i] = "default/pod-" + strconv.Itoa(i)
	}
	return ks
}()

// BenchmarkAddGetDone: one op is a round of 10,000 distinct keys added by 2
// producers and processed (Get, Done) by 2 workers, on a fresh queue that is
// shut down once the producers are done; the round ends when the workers
// have emptied it.
func BenchmarkAddGetDone(b *testing.B) {
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				round(side.new(b), keys[:10_000])
			}
		})
	}
}

func round(q queue, ks []string) {
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(k)
			}
		})
	}
	var producers sync.WaitGroup
	for p := range 2 {
		producers.Go(func() {
			for _, k := range ks[p*len(ks)/2 : (p+1)*len(ks)/2] {
				q.Add(k)
			}
		})
	}
	producers.Wait()
	q.ShutDown()
	workers.Wait()
}

// BenchmarkAddAfter: one op is an AddAfter of one of 100,000 pending keys
// with a new delay (an hour plus a varying part, so the earlier time wins
// about half the time). The clock stops only once the queue's delay
// goroutine has taken in every call, so a queue that merely buffers calls
// gains nothing.
func BenchmarkAddAfter(b *testing.B) {
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			q := side.new(b)
			defer q.ShutDown()
			for i, k := range keys {
				q.AddAfter(k, time.Hour+time.Duration(i)*time.Microsecond)
			}
			settle(b, q)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				q.AddAfter(keys[i%len(keys)], time.Hour+time.Duration(i*7919%len(keys))*time.Microsecond)
			}
			settle(b, q)
		})
	}
}

// settle returns once the delay goroutine has handled every earlier
// AddAfter: both queues take delayed adds first in, first out, so a
// sentinel with a tiny delay comes out of Get only after all of them.
func settle(b *testing.B, q queue) {
	q.AddAfter("sentinel", time.Nanosecond)
	if k, _ := q.Get(); k != "sentinel" {
		b.Fatalf("Get() = %q, want the sentinel", k)
	}
	q.Done("sentinel")
}

// BenchmarkOneWorker: one op is a burst of 100 keys (over 1 namespace or
// 100) added, then handed out and done one by one on the same goroutine: a
// controller's one worker (the default) draining what its informer queued,
// with a processor to spare. ns/key is what a key costs the queue.
func BenchmarkOneWorker(b *testing.B) {
	for _, flows := range []int{1, 100} {
		ks := make([]string, 100)
		for i := range ks {
			ks[i] = fmt.Sprintf("ns-%d/object-%d", i%flows, i)
		}
		for _, side := range sides {
			b.Run(fmt.Sprintf("namespaces=%d/%s", flows, side.name), func(b *testing.B) {
				q := side.new(b)
				defer q.ShutDown()
				for b.Loop() {
					for _, k := range ks {
						q.Add(k)
					}
					for range ks {
						k, _ := q.Get()
						q.Done(k)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ks)), "ns/key")
			})
		}
	}
}
