package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cgworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// FairConfig sizes S6 (noisy neighbour) and S7 (startup).
type FairConfig struct {
	// Backlog is the keys added at once: namespace A's (S6) or the initial
	// list's (S7). Default: 100,000.
	Backlog int
	// Stream is how long the other stream adds one key a millisecond:
	// namespace B's (S6) or fresh changes (S7). Default: 2s.
	Stream time.Duration
	// Work is each key's fixed processing time (a busy wait), on 2 workers.
	// Default: 50µs.
	Work time.Duration
}

func (c FairConfig) withDefaults() FairConfig {
	if c.Backlog == 0 {
		c.Backlog = 100000
	}
	if c.Stream == 0 {
		c.Stream = 2 * time.Second
	}
	if c.Work == 0 {
		c.Work = 50 * time.Microsecond
	}
	return c
}

// prioQueue is what S6 and S7 need of each side's queue.
type prioQueue interface {
	add(key string, priority int)
	Get() (string, bool)
	Done(string)
	ShutDown()
}

type ctrlkitQueue struct{ *workqueue.Queue[string] }

func (q ctrlkitQueue) add(k string, p int) { q.AddWithPriority(k, p) }

// clientGoQueue has no priorities: every add is a plain Add.
type clientGoQueue struct {
	cgworkqueue.TypedInterface[string]
}

func (q clientGoQueue) add(k string, _ int) { q.Add(k) }

type crQueue struct {
	priorityqueue.PriorityQueue[string]
}

func (q crQueue) add(k string, p int) { q.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, k) }

func newPrioQueue(side string) (prioQueue, error) {
	switch side {
	case Ctrlkit:
		q, err := workqueue.New(workqueue.Options[string]{})
		return ctrlkitQueue{q}, err
	case ControllerRuntime:
		return crQueue{priorityqueue.New[string]("")}, nil // no name: no metrics
	}
	return clientGoQueue{cgworkqueue.NewTyped[string]()}, nil
}

// NoisyNeighbour is S6.
func NoisyNeighbour(cfg FairConfig) Scenario {
	cfg = cfg.withDefaults()
	return Scenario{
		Name: "S6 noisy neighbour",
		Doc: fmt.Sprintf("Namespace A adds %d keys at once while namespace B adds one key a millisecond for %v; 2 workers, "+
			"%v of busy work per key; all at priority 0. Measured: B's add-to-get latency. ctrlkit workqueue.New (flows by "+
			"namespace), client-go workqueue.NewTyped, controller-runtime priorityqueue.New.", cfg.Backlog, cfg.Stream, cfg.Work),
		Metrics: []Metric{
			{Name: "b_p50_us", Unit: "µs", Better: "lower"},
			{Name: "b_p99_us", Unit: "µs", Better: "lower"},
			{Name: "drain_ms", Unit: "ms", Better: "lower"},
		},
		Extra: []string{ControllerRuntime},
		Run: func(ctx context.Context, side string) (Result, error) {
			q, err := newPrioQueue(side)
			if err != nil {
				return nil, err
			}
			res, err := runFair(ctx, cfg, q, "tenant-a/obj-%d", 0, "tenant-b/obj-%d")
			if err != nil {
				return nil, err
			}
			return Result{"b_p50_us": res.p50, "b_p99_us": res.p99, "drain_ms": res.drainMS}, nil
		},
	}
}

// Startup is S7.
func Startup(cfg FairConfig) Scenario {
	cfg = cfg.withDefaults()
	return Scenario{
		Name: "S7 startup",
		Doc: fmt.Sprintf("An informer's initial list queues %d keys in 100 namespaces (ctrlkit and controller-runtime at "+
			"their LowPriority, -100, as their handlers do; client-go has no priorities), then fresh changes arrive one a "+
			"millisecond for %v, at priority 0; 2 workers, %v of busy work per key. Measured: the fresh changes' "+
			"add-to-get latency.", cfg.Backlog, cfg.Stream, cfg.Work),
		Metrics: []Metric{
			{Name: "fresh_p50_us", Unit: "µs", Better: "lower"},
			{Name: "fresh_p99_us", Unit: "µs", Better: "lower"},
			{Name: "fresh_add_late_p50_us", Unit: "µs", Better: "lower"},
			{Name: "fresh_add_late_p99_us", Unit: "µs", Better: "lower"},
			{Name: "drain_ms", Unit: "ms", Better: "lower"},
		},
		Extra: []string{ControllerRuntime},
		Run: func(ctx context.Context, side string) (Result, error) {
			q, err := newPrioQueue(side)
			if err != nil {
				return nil, err
			}
			res, err := runFair(ctx, cfg, q, "ns-%[2]d/listed-%[1]d", workqueue.LowPriority, "ns-%[2]d/fresh-%[1]d")
			if err != nil {
				return nil, err
			}
			return Result{"fresh_p50_us": res.p50, "fresh_p99_us": res.p99, "fresh_add_late_p50_us": res.lateP50,
				"fresh_add_late_p99_us": res.lateP99, "drain_ms": res.drainMS}, nil
		},
	}
}

// fairResult is what runFair measured: the stream keys' add-to-get
// latency, how late each was added against its schedule (the producer
// waiting for a processor), and the time to hand out every key.
type fairResult struct{ p50, p99, lateP50, lateP99, drainMS float64 }

// runFair adds cfg.Backlog keys named by backlogFmt (index, index%100) at
// backlogPrio, and meanwhile one key a millisecond named by streamFmt at
// priority 0, while 2 workers process them; it returns the stream keys'
// add-to-get latency percentiles in µs and the time until every key was
// processed. Every key must be handed out exactly once.
func runFair(ctx context.Context, cfg FairConfig, q prioQueue, backlogFmt string, backlogPrio int, streamFmt string) (fairResult, error) {
	n := int(cfg.Stream / time.Millisecond)
	backlog := make([]string, cfg.Backlog)
	for i := range backlog {
		backlog[i] = fmt.Sprintf(backlogFmt, i, i%100)
	}
	stream := make([]string, n)
	for i := range stream {
		stream[i] = fmt.Sprintf(streamFmt, i, i%100)
	}
	tr := newTracked(stream, cfg.Backlog+n)
	late := make([]time.Duration, n) // added after its scheduled time by this much
	tr.serve(q, 2, func() {
		for start := time.Now(); time.Since(start) < cfg.Work; { // the fixed work
		}
	})
	start := time.Now()
	var producers sync.WaitGroup
	producers.Go(func() {
		for _, k := range backlog {
			q.add(k, backlogPrio)
		}
	})
	producers.Go(func() {
		for i, k := range stream {
			due := start.Add(time.Duration(i+1) * time.Millisecond)
			time.Sleep(time.Until(due)) // pacing the load, not synchronising
			late[i] = max(time.Since(due), 0)
			tr.added(i)
			q.add(k, 0)
		}
	})
	producers.Wait()
	err := tr.wait(ctx, q, 2*time.Minute)
	drain := time.Since(start)
	if err != nil {
		return fairResult{}, err
	}
	p50, p99 := tr.percentiles()
	slices.Sort(late)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fairResult{p50: p50, p99: p99, lateP50: us(late[n/2]), lateP99: us(late[n*99/100]),
		drainMS: float64(drain.Milliseconds())}, nil
}

// tracked is the bookkeeping of a fairness run: the add-to-get latency of
// the keys it watches, each of which must be handed out exactly once, and
// the count of every key processed.
type tracked struct {
	keys    []string
	index   map[string]int
	addedAt []atomic.Int64 // unix ns
	latency []time.Duration
	got     []atomic.Int32
	handed  atomic.Int64
	total   int64
	all     chan struct{} // closed once total keys were processed
	workers sync.WaitGroup
}

// newTracked watches keys, of total keys the run adds.
func newTracked(keys []string, total int) *tracked {
	t := &tracked{keys: keys, index: make(map[string]int, len(keys)), addedAt: make([]atomic.Int64, len(keys)),
		latency: make([]time.Duration, len(keys)), got: make([]atomic.Int32, len(keys)), total: int64(total), all: make(chan struct{})}
	for i, k := range keys {
		t.index[k] = i
	}
	return t
}

// added records that the i-th watched key is being added now.
func (t *tracked) added(i int) { t.addedAt[i].Store(time.Now().UnixNano()) }

// serve starts workers that process q's keys, each with work, until q
// shuts down.
func (t *tracked) serve(q prioQueue, workers int, work func()) {
	for range workers {
		t.workers.Go(func() {
			k, shutdown := q.Get()
			for !shutdown {
				if i, ok := t.index[k]; ok {
					t.latency[i] = time.Duration(time.Now().UnixNano() - t.addedAt[i].Load())
					t.got[i].Add(1)
				}
				work()
				if t.handed.Add(1) == t.total {
					close(t.all)
				}
				k, shutdown = finishAndTake(q, k) // ctrlkit's step with DoneAndGet, as its controllers' workers do
			}
		})
	}
}

// wait waits for every key to be processed (at most bound), shuts q down,
// waits for the workers and checks that every watched key was handed out
// once and no key twice.
func (t *tracked) wait(ctx context.Context, q prioQueue, bound time.Duration) error {
	var err error
	select {
	case <-t.all:
	case <-time.After(bound):
		err = fmt.Errorf("handed out %d of %d keys in %v", t.handed.Load(), t.total, bound)
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.ShutDown()
	t.workers.Wait()
	if err != nil {
		return err
	}
	if h := t.handed.Load(); h != t.total {
		return fmt.Errorf("handed out %d keys, want %d: a key was handed out twice", h, t.total)
	}
	for i := range t.got {
		if t.got[i].Load() != 1 {
			return fmt.Errorf("key %s handed out %d times", t.keys[i], t.got[i].Load())
		}
	}
	return nil
}

// percentiles returns the watched keys' add-to-get latency at p50 and p99,
// in µs.
func (t *tracked) percentiles() (p50, p99 float64) {
	slices.Sort(t.latency)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	n := len(t.latency)
	return us(t.latency[n/2]), us(t.latency[n*99/100])
}
