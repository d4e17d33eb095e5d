package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// PipelineConfig sizes S1.
type PipelineConfig struct {
	Objects    int // ConfigMaps in the initial list
	Events     int // watch events after it
	Namespaces int
	PageSize   int // list page size both informers use by default (500): checked, not set

	// eventPhase, if set, is called as the event phase starts, and the
	// function it returns as the phase ends: a hook for profiling in tests.
	eventPhase func() (end func())
}

// Pipeline is S1: the whole pipeline, list then watch, through a handler
// that enqueues keys to two workers reading the cache.
func Pipeline(cfg PipelineConfig) Scenario {
	return Scenario{
		Name: "S1 pipeline",
		Doc: fmt.Sprintf("In-memory ListerWatcher: %d ConfigMaps over %d namespaces (4 labels, 2 annotations, ~500 B of data, "+
			"one managedFields entry), listed in pages of %d, then %d watch events (~98%% updates, ~1%% deletes, ~1%% creates, "+
			"seeded) from a pre-filled channel behind watch.NewProxyWatcher, so no producer runs during the measurement. "+
			"Both sides list (ctrlkit Reflector.DisableWatchList; client-go's LW reports IsWatchListSemanticsUnSupported, so its "+
			"WatchListClient default does not stream). ctrlkit: informer.New + handler.EnqueueKey + controller.New/Run with 2 "+
			"workers (defaults: managedFields stripped). client-go: NewSharedIndexInformer (defaults: RealFIFO with batching) "+
			"+ NewTypedRateLimitingQueue + 2 workers calling GetByKey. sync_ms: start to HasSynced; the event phase starts "+
			"once every listed key was processed and ends when every key's final state (the last event's key included) "+
			"was read by a worker; allocations and bytes are runtime.MemStats deltas over that phase. reads_per_event: worker cache reads in that "+
			"phase per event (below 1 where updates of a key coalesce: in the work queue on both sides, and also in "+
			"ctrlkit's delta FIFO and per-handler backlog), so allocations per event also depend on how much coalesced.",
			cfg.Objects, cfg.Namespaces, cfg.PageSize, cfg.Events),
		Metrics: []Metric{
			{Name: "sync_ms", Unit: "ms", Better: "lower"},
			{Name: "events_per_sec", Unit: "events/s", Better: "higher"},
			{Name: "allocs_per_event", Unit: "allocs", Better: "lower"},
			{Name: "bytes_per_event", Unit: "B", Better: "lower"},
			{Name: "reads_per_event", Unit: "reads", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) { return runPipeline(ctx, cfg, side) },
	}
}

// pipelineInput is S1's input, generated afresh for every run (ctrlkit's
// default transform strips managedFields in place) from the same seed.
type pipelineInput struct {
	items    []corev1.ConfigMap
	listRV   int
	events   chan watch.Event // pre-filled with every event
	keys     []string         // by key id; ids 0..Objects-1 are the listed objects
	ids      map[string]int
	initial  []int64 // resource version of each listed key
	final    []int64 // resource version of each key after the last event; -1 deleted
	sentinel int     // the key of the last event
}

func newPipelineInput(cfg PipelineConfig) *pipelineInput {
	in := &pipelineInput{items: make([]corev1.ConfigMap, cfg.Objects), listRV: cfg.Objects,
		events: make(chan watch.Event, cfg.Events), ids: make(map[string]int, cfg.Objects+cfg.Events/50)}
	var cur []*corev1.ConfigMap // by key id: the newest version
	var live []int              // ids of the keys that exist
	addKey := func(obj *corev1.ConfigMap, rv int) int {
		id := len(in.keys)
		key := obj.Namespace + "/" + obj.Name
		in.keys, in.ids[key] = append(in.keys, key), id
		cur, live, in.final = append(cur, obj), append(live, id), append(in.final, int64(rv))
		return id
	}
	for i := range in.items {
		in.items[i] = configMap(i, cfg.Namespaces, rvString(i+1))
		addKey(&in.items[i], i+1)
		in.initial = append(in.initial, int64(i+1))
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	rv, id := in.listRV, 0
	for range cfg.Events {
		rv++
		switch x := rnd.IntN(100); {
		case x == 0 || len(live) == 0:
			obj := configMap(len(in.keys), cfg.Namespaces, rvString(rv))
			id = addKey(&obj, rv)
			in.events <- watch.Event{Type: watch.Added, Object: &obj}
		case x == 1:
			k := rnd.IntN(len(live))
			id = live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			obj := *cur[id] // a new object, as decoding would give, sharing the unchanged maps
			obj.ResourceVersion = rvString(rv)
			in.final[id] = -1
			in.events <- watch.Event{Type: watch.Deleted, Object: &obj}
		default:
			id = live[rnd.IntN(len(live))]
			obj := *cur[id]
			obj.ResourceVersion = rvString(rv)
			cur[id], in.final[id] = &obj, int64(rv)
			in.events <- watch.Event{Type: watch.Modified, Object: &obj}
		}
	}
	in.sentinel = id
	return in
}

// pipelineRun records what the workers of one run read from the cache.
type pipelineRun struct {
	in       *pipelineInput
	seen     []atomic.Int64 // by key id: the resource version a worker last read; -1 not cached, 0 never read
	unknown  atomic.Int64   // keys the workers were given that the input does not have
	reads    atomic.Int64   // cache reads by the workers
	sentinel atomic.Bool
	done     chan struct{} // closed when a worker read the last event's key in its final state
}

// observe is the workers' work: record the version of key's cached object.
func (r *pipelineRun) observe(key string, obj *corev1.ConfigMap, cached bool) {
	r.reads.Add(1)
	id, ok := r.in.ids[key]
	if !ok {
		r.unknown.Add(1)
		return
	}
	v := int64(-1)
	if cached {
		n, err := strconv.ParseInt(obj.ResourceVersion, 10, 64)
		if err != nil {
			r.unknown.Add(1)
			return
		}
		v = n
	}
	r.seen[id].Store(v)
	if id == r.in.sentinel && v == r.in.final[id] && r.sentinel.CompareAndSwap(false, true) {
		close(r.done)
	}
}

// waitSeen waits until the workers have read every key in its wanted state.
// A key created and deleted by the events may never reach a worker (a
// handler may coalesce its add and delete into nothing), so for keys not in
// the list "never read" also counts as deleted.
func (r *pipelineRun) waitSeen(ctx context.Context, want []int64, timeout time.Duration) error {
	i := 0
	err := poll(ctx, timeout, time.Millisecond, "workers reading every key", func() bool {
		for ; i < len(want); i++ {
			got := r.seen[i].Load()
			if got != want[i] && (want[i] != -1 || got != 0 || i < len(r.in.initial)) {
				return false
			}
		}
		return true
	})
	if err != nil && i < len(want) {
		return fmt.Errorf("%w: key %s last read at version %d, want %d", err, r.in.keys[i], r.seen[i].Load(), want[i])
	}
	return err
}

// pipeline is one side's running informer, handler, queue and workers.
type pipeline interface {
	synced() bool
	get(key string) (*corev1.ConfigMap, bool)
	len() int
	stop() error // cancels and joins every goroutine
}

func runPipeline(ctx context.Context, cfg PipelineConfig, side string) (Result, error) {
	in := newPipelineInput(cfg)
	gate := make(chan struct{})
	src := &memSource[corev1.ConfigMap, *corev1.ConfigMap]{
		n: cfg.Objects, items: func(_, start, end int) []corev1.ConfigMap { return in.items[start:end:end] },
		listRV: func(int) string { return rvString(in.listRV) }, wrap: configMapList,
		watch: func(ctx context.Context, n int) (watch.Interface, error) {
			if n > 0 {
				return idleWatch(), nil // a second watch would mean the first one was lost: verification fails
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return watch.NewProxyWatcher(in.events), nil
		}}
	r := &pipelineRun{in: in, seen: make([]atomic.Int64, len(in.keys)), done: make(chan struct{})}
	runtime.GC()

	start := time.Now()
	p, err := startPipeline(ctx, side, src, r.observe)
	if err != nil {
		return nil, err
	}
	res, err := measurePipeline(ctx, p, r, gate, start, cfg)
	if serr := p.stop(); err == nil {
		err = serr
	}
	if err == nil {
		err = verifyPipeline(p, r, src, cfg.PageSize)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func startPipeline(ctx context.Context, side string, src *memSource[corev1.ConfigMap, *corev1.ConfigMap],
	observe func(string, *corev1.ConfigMap, bool)) (pipeline, error) {
	if side == Ctrlkit {
		return startCtrlkitPipeline(ctx, src, observe)
	}
	return startClientGoPipeline(ctx, src, observe), nil
}

func measurePipeline(ctx context.Context, p pipeline, r *pipelineRun, gate chan struct{}, start time.Time, cfg PipelineConfig) (Result, error) {
	if err := poll(ctx, 5*time.Minute, time.Millisecond, "informer synced", p.synced); err != nil {
		return nil, err
	}
	synced := time.Since(start)
	if err := r.waitSeen(ctx, r.in.initial, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("initial list: %w", err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	reads := r.reads.Load()
	end := func() {}
	if cfg.eventPhase != nil {
		end = cfg.eventPhase()
	}
	t0 := time.Now()
	close(gate)
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Minute):
		return nil, fmt.Errorf("the last event's key %s was not processed after 10m", r.in.keys[r.in.sentinel])
	}
	if err := r.waitSeen(ctx, r.in.final, time.Minute); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	elapsed := time.Since(t0)
	end()
	runtime.ReadMemStats(&after)
	n := float64(cfg.Events)
	return Result{
		"sync_ms":          ms(synced),
		"events_per_sec":   n / elapsed.Seconds(),
		"allocs_per_event": float64(after.Mallocs-before.Mallocs) / n,
		"bytes_per_event":  float64(after.TotalAlloc-before.TotalAlloc) / n,
		"reads_per_event":  float64(r.reads.Load()-reads) / n,
	}, nil
}

// verifyPipeline checks that the side listed (no watch-list), watched once,
// handed the workers only known keys, and that its cache equals the source.
func verifyPipeline(p pipeline, r *pipelineRun, src *memSource[corev1.ConfigMap, *corev1.ConfigMap], pageSize int) error {
	if err := src.checkPaths(1); err != nil {
		return err
	}
	if n, want := int(src.pages.Load()), (src.n+pageSize-1)/pageSize; n != want {
		return fmt.Errorf("listed %d pages, want %d of %d", n, want, pageSize)
	}
	if n := src.watches.Load(); n != 1 {
		return fmt.Errorf("%d watches, want 1", n)
	}
	if n := r.unknown.Load(); n > 0 {
		return fmt.Errorf("workers got %d keys that are not in the input", n)
	}
	live := 0
	for id, key := range r.in.keys {
		want := r.in.final[id]
		obj, ok := p.get(key)
		switch {
		case want == -1 && ok:
			return fmt.Errorf("cache holds deleted key %s", key)
		case want == -1:
			continue
		case !ok:
			return fmt.Errorf("cache lacks key %s", key)
		case obj.ResourceVersion != rvString(int(want)) || obj.Namespace+"/"+obj.Name != key:
			return fmt.Errorf("cache holds %s/%s at version %s, want %s at %d", obj.Namespace, obj.Name, obj.ResourceVersion, key, want)
		}
		live++
	}
	if n := p.len(); n != live {
		return fmt.Errorf("cache holds %d objects, the source %d", n, live)
	}
	return nil
}

// configMapList wraps a page for client-go.
func configMapList(items []corev1.ConfigMap, rv, cont string) kruntime.Object {
	l := &corev1.ConfigMapList{Items: items}
	l.ResourceVersion, l.Continue = rv, cont
	return l
}

// ctrlkitPipeline: informer.New, handler.EnqueueKey into controller.New's
// queue, controller.Run with 2 workers.
type ctrlkitPipeline struct {
	inf    *informer.SharedIndexInformer[*corev1.ConfigMap]
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   [2]error
}

func startCtrlkitPipeline(ctx context.Context, src *memSource[corev1.ConfigMap, *corev1.ConfigMap],
	observe func(string, *corev1.ConfigMap, bool)) (*ctrlkitPipeline, error) {
	inf, err := informer.New[*corev1.ConfigMap](ctrlkitLW[corev1.ConfigMap, *corev1.ConfigMap]{src},
		informer.Options[*corev1.ConfigMap]{Reflector: reflector.Options{DisableWatchList: true}})
	if err != nil {
		return nil, err
	}
	idx := inf.Indexer()
	ctrl, err := controller.New[string](controller.ReconcileFunc[string](func(_ context.Context, key string) (controller.Result, error) {
		obj, ok := idx.GetByKey(key)
		observe(key, obj, ok)
		return controller.Result{}, nil
	}), controller.Options[string]{Workers: 2})
	if err != nil {
		return nil, err
	}
	reg, err := inf.AddEventHandler(handler.EnqueueKey[*corev1.ConfigMap](ctrl, nil), informer.HandlerOptions{})
	if err != nil {
		return nil, err
	}
	ctrl.WaitFor("configmaps", reg.HasSynced, nil)
	ctx, cancel := context.WithCancel(ctx)
	p := &ctrlkitPipeline{inf: inf, cancel: cancel}
	p.wg.Go(func() { p.errs[0] = inf.Run(ctx) })
	p.wg.Go(func() { p.errs[1] = ctrl.Run(ctx) })
	return p, nil
}

func (p *ctrlkitPipeline) synced() bool { return p.inf.HasSynced() }
func (p *ctrlkitPipeline) get(key string) (*corev1.ConfigMap, bool) {
	return p.inf.Indexer().GetByKey(key)
}
func (p *ctrlkitPipeline) len() int { return p.inf.Indexer().Len() }
func (p *ctrlkitPipeline) stop() error {
	p.cancel()
	p.wg.Wait()
	return errors.Join(p.errs[:]...)
}

// clientGoPipeline: NewSharedIndexInformer, an event handler adding keys to
// NewTypedRateLimitingQueue, 2 workers calling GetByKey, Forget and Done.
type clientGoPipeline struct {
	inf    cache.SharedIndexInformer
	queue  cgworkqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startClientGoPipeline(ctx context.Context, src *memSource[corev1.ConfigMap, *corev1.ConfigMap],
	observe func(string, *corev1.ConfigMap, bool)) *clientGoPipeline {
	inf := cache.NewSharedIndexInformer(newClientGoLW(src), &corev1.ConfigMap{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	q := cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue})
	ctx, cancel := context.WithCancel(ctx)
	p := &clientGoPipeline{inf: inf, queue: q, cancel: cancel}
	p.wg.Go(func() { inf.RunWithContext(ctx) })
	indexer := inf.GetIndexer()
	for range 2 {
		p.wg.Go(func() {
			if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
				return
			}
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				obj, ok, _ := indexer.GetByKey(key)
				cm, _ := obj.(*corev1.ConfigMap)
				observe(key, cm, ok && cm != nil)
				q.Forget(key)
				q.Done(key)
			}
		})
	}
	return p
}

func (p *clientGoPipeline) synced() bool { return p.inf.HasSynced() }
func (p *clientGoPipeline) get(key string) (*corev1.ConfigMap, bool) {
	obj, ok, _ := p.inf.GetIndexer().GetByKey(key)
	cm, _ := obj.(*corev1.ConfigMap)
	return cm, ok && cm != nil
}
func (p *clientGoPipeline) len() int { return len(p.inf.GetIndexer().ListKeys()) }
func (p *clientGoPipeline) stop() error {
	p.cancel()
	p.queue.ShutDown()
	p.wg.Wait()
	return nil
}
