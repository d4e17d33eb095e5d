package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// QueueConfig sizes S3.
type QueueConfig struct {
	Keys, Adds, Producers, Workers int
	// Rate paces the latency phase: adds per second, below what either
	// queue can absorb, so latency measures the queue, not a backlog.
	// Default: 100,000.
	Rate int
	// Busy runs as many busy neighbours as the process has processors
	// (GOMAXPROCS) through both phases: goroutines of the same process
	// that compute without pause, as other controllers' workers do, so
	// producers and workers compete with them for processors.
	Busy bool
}

// queue is what S3 needs of either library's work queue.
type queue interface {
	Add(string)
	Get() (string, bool)
	Done(string)
	ShutDown()
}

// Queue is S3: producers add random keys, workers take and finish them
// (ctrlkit's step with DoneAndGet, client-go's call Done then Get).
func Queue(cfg QueueConfig) Scenario {
	name, busy := "S3 work queue", ""
	if cfg.Busy {
		name, busy = "S3 work queue, busy neighbours", fmt.Sprintf(" Busy neighbours: %d goroutines (GOMAXPROCS) of the same "+
			"process compute without pause through both phases, competing with producers and workers for processors.",
			runtime.GOMAXPROCS(0))
	}
	return Scenario{
		Name: name,
		Doc: fmt.Sprintf("Throughput: %d producers add %d random keys of %d as fast as they can; %d workers Get and Done "+
			"each; saturated_p50/p99 are the add-to-get latencies of that phase (a backlog included). Latency: the same at "+
			"a paced %d adds/s (open loop, so a saturated queue's backlog does not count), from "+
			"the first Add that queued a key to the Get that handed it out. ctrlkit workqueue.New (its workers step with "+
			"DoneAndGet, as its controllers' do) vs client-go workqueue.NewTyped (Done, then Get).", cfg.Producers, cfg.Adds, cfg.Keys, cfg.Workers, cfg.rate()) + busy,
		Metrics: []Metric{
			{Name: "adds_per_sec", Unit: "adds/s", Better: "higher"},
			{Name: "p50_latency_us", Unit: "µs", Better: "lower"},
			{Name: "p99_latency_us", Unit: "µs", Better: "lower"},
			{Name: "saturated_p50_latency_us", Unit: "µs", Better: "lower"},
			{Name: "saturated_p99_latency_us", Unit: "µs", Better: "lower"},
			{Name: "allocs_per_add", Unit: "allocs", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) {
			if cfg.Busy {
				defer neighbours(runtime.GOMAXPROCS(0))()
			}
			q, err := newQueue(side)
			if err != nil {
				return nil, err
			}
			res, err := runQueue(ctx, cfg, q, 0)
			if err != nil {
				return nil, err
			}
			res["saturated_p50_latency_us"], res["saturated_p99_latency_us"] = res["p50_latency_us"], res["p99_latency_us"]
			if q, err = newQueue(side); err != nil {
				return nil, err
			}
			paced, err := runQueue(ctx, QueueConfig{Keys: cfg.Keys, Adds: cfg.rate(), Producers: cfg.Producers, Workers: cfg.Workers}, q, cfg.rate())
			if err != nil {
				return nil, err
			}
			res["p50_latency_us"], res["p99_latency_us"] = paced["p50_latency_us"], paced["p99_latency_us"]
			return res, nil
		},
	}
}

// neighbours starts n goroutines that compute until the returned function
// stops them (and waits for them).
func neighbours(n int) (stop func()) {
	var (
		done atomic.Bool
		wg   sync.WaitGroup
		sink atomic.Uint64
	)
	for i := range n {
		wg.Go(func() {
			x := uint64(i + 1)
			for !done.Load() {
				for range 1000 { // a little work between looks at done
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
				}
			}
			sink.Add(x)
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

func (c QueueConfig) rate() int {
	if c.Rate == 0 {
		return 100000
	}
	return c.Rate
}

func newQueue(side string) (queue, error) {
	if side == Ctrlkit {
		return workqueue.New(workqueue.Options[string]{})
	}
	return cgworkqueue.NewTyped[string](), nil
}

// queueRun is the shared state of one S3 run. Index i of each slice is key i.
type queueRun struct {
	keys      []string
	index     map[string]int
	added     []atomic.Int64 // adds of key i so far
	processed []atomic.Int64 // added[i] as seen by the last Get of key i
	firstAdd  []atomic.Int64 // unix ns of the first Add since the last Get, 0 if none
}

// runQueue runs one phase; rate > 0 paces the producers (adds per second in all).
func runQueue(ctx context.Context, cfg QueueConfig, q queue, rate int) (Result, error) {
	r := &queueRun{keys: make([]string, cfg.Keys), index: make(map[string]int, cfg.Keys),
		added: make([]atomic.Int64, cfg.Keys), processed: make([]atomic.Int64, cfg.Keys), firstAdd: make([]atomic.Int64, cfg.Keys)}
	for i := range r.keys {
		r.keys[i] = fmt.Sprintf("ns-%d/object-%d", i%100, i)
		r.index[r.keys[i]] = i
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()

	lat := make([][]time.Duration, cfg.Workers)
	var workers sync.WaitGroup
	for w := range cfg.Workers {
		workers.Go(func() { lat[w] = r.work(q) })
	}
	var producers sync.WaitGroup
	for p := range cfg.Producers {
		producers.Go(func() { r.produce(q, p, cfg.Adds/cfg.Producers, rate/cfg.Producers) })
	}
	producers.Wait()
	err := r.waitProcessed(ctx, time.Minute)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	q.ShutDown()
	workers.Wait()
	if err != nil {
		return nil, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	adds := float64(cfg.Adds / cfg.Producers * cfg.Producers)
	return Result{
		"adds_per_sec":   adds / elapsed.Seconds(),
		"p50_latency_us": float64(all[len(all)/2].Microseconds()),
		"p99_latency_us": float64(all[len(all)*99/100].Microseconds()),
		"allocs_per_add": float64(after.Mallocs-before.Mallocs) / adds,
	}, nil
}

// produce adds n random keys; with rate > 0, at that many per second, in
// batches of a millisecond.
func (r *queueRun) produce(q queue, p, n, rate int) {
	rnd := rand.New(rand.NewPCG(uint64(p), 42))
	start := time.Now()
	for j := range n {
		if rate > 0 && j%max(rate/1000, 1) == 0 {
			due := start.Add(time.Duration(j) * time.Second / time.Duration(rate))
			time.Sleep(time.Until(due)) // pacing the load, not synchronising
		}
		i := rnd.IntN(len(r.keys))
		r.added[i].Add(1)
		r.firstAdd[i].CompareAndSwap(0, time.Now().UnixNano())
		q.Add(r.keys[i])
	}
}

// stepper is a queue whose workers finish a key and get the next under one
// lock: ctrlkit's, whose controllers' workers step so (Queue.DoneAndGet).
type stepper interface {
	DoneAndGet(string) (string, bool)
}

// finishAndTake finishes k and takes the next key: in one call on a queue that
// steps, Done then Get on the others.
func finishAndTake(q interface {
	Get() (string, bool)
	Done(string)
}, k string) (string, bool) {
	if s, ok := q.(stepper); ok {
		return s.DoneAndGet(k)
	}
	q.Done(k)
	return q.Get()
}

func (r *queueRun) work(q queue) []time.Duration {
	var lat []time.Duration
	k, shutdown := q.Get()
	for !shutdown {
		i := r.index[k]
		if t := r.firstAdd[i].Swap(0); t != 0 {
			lat = append(lat, time.Duration(time.Now().UnixNano()-t))
		}
		r.processed[i].Store(r.added[i].Load())
		k, shutdown = finishAndTake(q, k)
	}
	return lat
}

// waitProcessed waits until every key's last Get came after its last Add:
// then no add was lost.
func (r *queueRun) waitProcessed(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(r.keys); {
		if r.processed[i].Load() == r.added[i].Load() {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("key %s: %d adds, last Get saw %d: an add was lost", r.keys[i], r.added[i].Load(), r.processed[i].Load())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
