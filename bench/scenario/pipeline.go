package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// PipelineConfig sizes S1.
type PipelineConfig struct {
	Objects    int // ConfigMaps in the initial list
	Events     int // watch events after it
	Namespaces int
	PageSize   int // list page size both informers use by default (500): checked, not set
	// Wire serves the input as the API server's protobuf bytes, which both
	// sides decode through their usual clients (see wireServer), instead of
	// handing them objects built as a decoder would. Its metrics include
	// decoding: they have no _net suffix.
	Wire bool
	// Workers is the number of workers on each side. Default: 2.
	Workers int

	// phase, if set, is called as each phase ("sync", "events") starts, and
	// the function it returns as the phase ends: a hook for profiling in
	// tests.
	phase func(name string) (end func())
}

// workers returns Workers or its default.
func (c PipelineConfig) workers() int {
	if c.Workers <= 0 {
		return 2
	}
	return c.Workers
}

// Pipeline is S1: the whole pipeline, list then watch, through a handler
// that enqueues keys to workers (two by default) reading the cache.
func Pipeline(cfg PipelineConfig) Scenario {
	name, doc, net := "S1 pipeline", fmt.Sprintf("In-memory source: %d ConfigMaps over %d namespaces (4 labels, 2 annotations, ~500 B of data, "+
		"one managedFields entry), listed in pages of %d, then %d watch events (~98%% updates, ~1%% deletes, ~1%% creates, "+
		"seeded). Every object is built when it is served, every string and map newly allocated, as a decoder does: "+
		"list pages as they are requested, watch events by the watch's own goroutine as the consumer takes them (100 "+
		"buffered). That source cost is measured once on its own and subtracted in the _net figures. Both sides list "+
		"(ctrlkit Reflector.DisableWatchList; client-go's LW reports IsWatchListSemanticsUnSupported) through their "+
		"usual list adapters (listwatch.New / cache.ListWatch). ",
		cfg.Objects, cfg.Namespaces, cfg.PageSize, cfg.Events), "_net"
	if cfg.Wire {
		name, doc, net = "S1 pipeline, protobuf", fmt.Sprintf("The same input as S1 (%d ConfigMaps over %d namespaces in pages "+
			"of %d, then %d watch events) as the API server sends it: every list page and watch frame encoded once per process "+
			"with the server's own protobuf serializer and framer, kept outside the Go heap and served by an http.RoundTripper "+
			"(no sockets) that answers GET /api/v1/configmaps. Each side reads and decodes the bytes through its usual client: "+
			"ctrlkit listwatch.Kind (what the manager uses) with Reflector.DisableWatchList, client-go a clientset's "+
			"ConfigMaps(\"\").List/Watch in protobuf (as its informer factory) reporting IsWatchListSemanticsUnSupported. "+
			"Nothing is subtracted: CPU, allocations and bytes include decoding. ctrlkit's handler is EnqueueKey into the "+
			"controller, which its informer calls inline, as it calls the manager's For/Owns sources; "+
			"neither side counts bytes received. Rows \"vs client-go + strip\": client-go with SetTransform stripping "+
			"managedFields after decoding (ctrlkit cuts them before). ",
			cfg.Objects, cfg.Namespaces, cfg.PageSize, cfg.Events), ""
	}
	doc += "Rows \"ctrlkit + metrics\": the seed path with its controller's and queue's metrics registered, as the " +
		"manager's controllers always have them (the manager's path is the row to compare it with). "
	extra := []string{Floor, CtrlkitMetrics, CtrlkitManager}
	if cfg.Wire {
		extra = []string{ClientGoStrip, CtrlkitMetrics, CtrlkitManager}
	} else {
		doc += "Rows \"vs floor\": no pipeline at all, one goroutine keeping every object in a map by key and handing it " +
			"straight to the run's reader (no FIFO, queue, handler, index, cache read or stripping): what caching these " +
			"objects costs by itself, the collector's marking of the cache under the source's allocations included. "
	}
	if w := cfg.workers(); w != 2 {
		name += fmt.Sprintf(", %d worker(s)", w)
	}
	return Scenario{
		Name:  name,
		Extra: extra,
		Doc: doc + fmt.Sprintf("ctrlkit: informer.New + handler.EnqueueKey + "+
			"controller.New/Run with %d worker(s) (defaults: managedFields stripped). client-go: NewSharedIndexInformer "+
			"(defaults) + NewTypedRateLimitingQueue + %[1]d worker(s) calling GetByKey. ", cfg.workers()) + "sync_ms: start to HasSynced (polled every " +
			"ms on both sides), sync_cpu_ms the process CPU time meanwhile (building the list included); the event phase starts once every listed key was processed and ends when every key's final " +
			"state was read by a worker; events_per_sec includes building the events (on the watch goroutine, in parallel); " +
			"cpu, allocations and bytes are process rusage and runtime.MemStats deltas over that phase. gc_cpu_us_per_event: " +
			"the runtime's own estimate of its collector's CPU (runtime/metrics /cpu/classes/gc/total: updated as each " +
			"collection ends, idle mark workers included, pauses charged for every processor), not a part of the rusage " +
			"figure, never net: the source's allocations start collections too, and each collection marks the whole cache. " +
			"gc_cycles: the collections that ended in the event phase, so few (3 to 8) that one more or less moves the figure " +
			"above by an eighth to a third. " +
			"reads_per_event: " +
			"worker cache reads per event (below 1 where updates of a key coalesce). live_heap_mb: heap after the churn " +
			"and two GCs, minus the heap before the informer started.",
		Metrics: []Metric{
			{Name: "sync_ms", Unit: "ms", Better: "lower"},
			{Name: "sync_cpu_ms", Unit: "ms", Better: "lower"},
			{Name: "events_per_sec", Unit: "events/s", Better: "higher"},
			{Name: "cpu_us_per_event" + net, Unit: "µs", Better: "lower"},
			{Name: "gc_cpu_us_per_event", Unit: "µs", Better: "lower"},
			{Name: "gc_cycles", Unit: "collections", Better: "lower"},
			{Name: "allocs_per_event" + net, Unit: "allocs", Better: "lower"},
			{Name: "bytes_per_event" + net, Unit: "B", Better: "lower"},
			{Name: "reads_per_event", Unit: "reads", Better: "lower"},
			{Name: "live_heap_mb", Unit: "MB", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) { return runPipeline(ctx, cfg, side) },
	}
}

// pipelineInput is S1's input plan: which key each event touches and how,
// computed once per run from the same seed. The objects themselves are built
// only as the informer lists and watches them, fresh each time (every string
// and map newly allocated, as a decoder's), so the input holds no object.
type pipelineInput struct {
	namespaces int
	listRV     int
	plan       []plannedEvent
	keys       []string // by key id; ids 0..Objects-1 are the listed objects
	initial    []int64  // resource version of each listed key
	final      []int64  // resource version of each key after the last event; -1 deleted
	sentinel   int      // the key of the last event
}

// plannedEvent is event k of the watch: its object is key id's ConfigMap
// at resource version listRV+k+1.
type plannedEvent struct {
	typ watch.EventType
	id  int32
}

func newPipelineInput(cfg PipelineConfig) *pipelineInput {
	in := &pipelineInput{namespaces: cfg.Namespaces, listRV: cfg.Objects, plan: make([]plannedEvent, 0, cfg.Events)}
	var live []int // ids of the keys that exist
	addKey := func(rv int) int {
		id := len(in.keys)
		key := fmt.Sprintf("ns-%03d/cm-%07d", id%cfg.Namespaces, id) // configMap's namespace and name
		in.keys = append(in.keys, key)
		live, in.final = append(live, id), append(in.final, int64(rv))
		return id
	}
	for i := range cfg.Objects {
		addKey(i + 1)
		in.initial = append(in.initial, int64(i+1))
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	rv, id := in.listRV, 0
	for range cfg.Events {
		rv++
		typ := watch.Modified
		switch x := rnd.IntN(100); {
		case x == 0 || len(live) == 0:
			typ, id = watch.Added, addKey(rv)
		case x == 1:
			k := rnd.IntN(len(live))
			typ, id = watch.Deleted, live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			in.final[id] = -1
		default:
			id = live[rnd.IntN(len(live))]
			in.final[id] = int64(rv)
		}
		in.plan = append(in.plan, plannedEvent{typ: typ, id: int32(id)})
	}
	in.sentinel = id
	return in
}

// event builds event k of the plan, its object fresh.
func (in *pipelineInput) event(k int) watch.Event {
	e := in.plan[k]
	obj := configMap(int(e.id), in.namespaces, rvString(in.listRV+k+1))
	return watch.Event{Type: e.typ, Object: &obj}
}

// generatedWatch is a watch whose goroutine builds each event of the plan
// as the consumer takes it, as a watch decoder does, then idles until
// stopped (it never closes its channel: a closed watch would be re-opened).
type generatedWatch struct {
	ch   chan watch.Event
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func newGeneratedWatch(in *pipelineInput) *generatedWatch {
	w := &generatedWatch{ch: make(chan watch.Event, 100), quit: make(chan struct{})}
	w.wg.Go(func() {
		for k := range in.plan {
			select {
			case w.ch <- in.event(k):
			case <-w.quit:
				return
			}
		}
	})
	return w
}

func (w *generatedWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *generatedWatch) Stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}

// sourceCost is what building the events costs by itself, on one goroutine:
// the "decoder" both sides pay for, subtracted from their figures.
type sourceCost struct{ cpu, allocs, bytes float64 } // per event

var (
	sourceCostOnce sync.Once
	sourceCostOf   sourceCost
)

// measureSourceCost builds every event of in once, keeping none, and
// returns the cost per event. It is measured once per process.
func measureSourceCost(in *pipelineInput) sourceCost {
	sourceCostOnce.Do(func() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cpu0 := ProcessCPU()
		var sink atomic.Pointer[watch.Event]
		for k := range in.plan {
			e := in.event(k)
			sink.Store(&e)
		}
		cpu := ProcessCPU() - cpu0
		runtime.ReadMemStats(&after)
		n := float64(len(in.plan))
		sourceCostOf = sourceCost{cpu: float64(cpu.Microseconds()) / n,
			allocs: float64(after.Mallocs-before.Mallocs) / n, bytes: float64(after.TotalAlloc-before.TotalAlloc) / n}
	})
	return sourceCostOf
}

// ProcessCPU is the user and system CPU time the process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// GCCPU is the CPU time the Go runtime estimates its collector has used
// (runtime/metrics /cpu/classes/gc/total: mark workers, idle ones too, and
// assists; pauses charged for every processor). The runtime updates it as
// each collection ends, so a phase counts the collections that end in it;
// it overestimates, and compares with rusage only roughly.
func GCCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
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
	ns, name, _ := strings.Cut(key, "/")
	id, ok := r.in.idOf(ns, name)
	r.record(id, ok, obj, cached)
}

// observeName is observe for a worker given a typed name.
func (r *pipelineRun) observeName(n object.ObjectName, obj *corev1.ConfigMap, cached bool) {
	id, ok := r.in.idOf(n.Namespace, n.Name)
	r.record(id, ok, obj, cached)
}

// idOf reads the key id a name says ("cm-%07d", see newPipelineInput) and
// checks the namespace against it ("ns-%03d", the id modulo the
// namespaces). Both observers find an id this way, at the same cost,
// whichever form of key their library hands a worker (a map of typed names
// costs more to look up than one of strings: the harness's work, not the
// library's), and neither reads a table the size of the input.
func (in *pipelineInput) idOf(ns, name string) (id int, ok bool) {
	id, ok = digits(name, "cm-", 7)
	nsID, nsOK := digits(ns, "ns-", 3)
	return id, ok && nsOK && id < len(in.keys) && nsID == id%in.namespaces
}

// digits parses s as prefix followed by at least n decimal digits (a
// number printed with %0nd).
func digits(s, prefix string, n int) (v int, ok bool) {
	if len(s) < len(prefix)+n || !strings.HasPrefix(s, prefix) {
		return 0, false
	}
	for _, c := range []byte(s[len(prefix):]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// record notes that a worker read key id (known: the input has it).
func (r *pipelineRun) record(id int, known bool, obj *corev1.ConfigMap, cached bool) {
	r.reads.Add(1)
	if !known {
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
	var (
		cost sourceCost
		lws  pipelineLWs
	)
	if cfg.Wire {
		w, err := wireInputOf(in, cfg)
		if err != nil {
			return nil, err
		}
		if lws, err = (&wireServer{in: w, pageSize: cfg.PageSize, gate: gate}).listerWatchers(); err != nil {
			return nil, err
		}
	} else {
		cost = measureSourceCost(in)
		src := configMapSource(cfg.Objects, cfg.Namespaces, func(ctx context.Context, n int) (watch.Interface, error) {
			if n > 0 {
				return idleWatch(), nil // a second watch would mean the first one was lost: verification fails
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return newGeneratedWatch(in), nil
		})
		lws = pipelineLWs{ctrlkit: newCtrlkitLW(src), clientGo: newClientGoLW(src), check: src.checkPipeline}
	}
	r := &pipelineRun{in: in, seen: make([]atomic.Int64, len(in.keys)), done: make(chan struct{})}
	base := liveHeap()

	endSync := func() {}
	if cfg.phase != nil {
		endSync = cfg.phase("sync")
	}
	cpuStart, start := ProcessCPU(), time.Now()
	p, err := startPipeline(ctx, side, lws, r, cfg.workers(), cfg.PageSize)
	if err != nil {
		return nil, err
	}
	res, err := measurePipeline(ctx, p, r, gate, start, cpuStart, endSync, cfg, cost, base)
	if serr := p.stop(); err == nil {
		err = serr
	}
	if err == nil {
		err = lws.check(cfg.Objects, cfg.PageSize)
	}
	if err == nil {
		err = verifyPipeline(p, r)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// pipelineLWs is S1's source as each side's ListerWatcher, and the check
// of what it served (n objects listed in pages of pageSize, one watch).
type pipelineLWs struct {
	ctrlkit  reflector.ListerWatcher[*corev1.ConfigMap]
	clientGo cache.ListerWatcher
	check    func(n, pageSize int) error
}

func startPipeline(ctx context.Context, side string, lws pipelineLWs, r *pipelineRun, workers, pageSize int) (pipeline, error) {
	switch side {
	case Ctrlkit:
		return startCtrlkitPipeline(ctx, lws.ctrlkit, r.observe, nil, workers, -1)
	case CtrlkitMetrics:
		return startCtrlkitPipeline(ctx, lws.ctrlkit, r.observe, nil, workers, seedMetrics)
	case CtrlkitManager:
		return startCtrlkitPipeline(ctx, lws.ctrlkit, nil, r.observeName, workers, -1)
	case CtrlkitManagerTraced1:
		return startCtrlkitPipeline(ctx, lws.ctrlkit, nil, r.observeName, workers, 0.01)
	case CtrlkitManagerTraced100:
		return startCtrlkitPipeline(ctx, lws.ctrlkit, nil, r.observeName, workers, 1)
	case Floor:
		return startFloorPipeline(ctx, cache.ToListerWatcherWithContext(lws.clientGo), r.observe, pageSize), nil
	}
	return startClientGoPipeline(ctx, lws.clientGo, r.observe, side == ClientGoStrip, workers)
}

// CtrlkitManager is an extra side of S1 and S1w: the same informer as
// ctrlkit's, feeding a controller built by manager.NewController with a
// For source (the manager's key path: its source handler, reasons and
// AddBatchBecause, the controller with the manager's options and
// metrics), reconciling typed names. The manager itself is not run: it
// would list through an API server this input has not got.
const CtrlkitManager = "ctrlkit manager"

// CtrlkitManagerTraced1 and CtrlkitManagerTraced100 are CtrlkitManager
// with the manager's Options.TracerProvider set (OpenTelemetry's SDK, its
// spans batched to an exporter that drops them): 1% of the events drawn
// for tracing by the manager (Options.TraceSampling 0.01, the SDK's
// sampler ParentBased(AlwaysSample)), and every reconcile traced.
const (
	CtrlkitManagerTraced1   = "ctrlkit manager + tracing 1%"
	CtrlkitManagerTraced100 = "ctrlkit manager + tracing 100%"
)

// CtrlkitMetrics is an extra side of S1 and S1w: the seed path (ctrlkit's
// side) with its controller's and queue's metrics registered, as the
// manager registers every controller's: the seed path with what the
// manager's path always has, for comparing the two key paths.
const CtrlkitMetrics = "ctrlkit + metrics"

// ClientGoStrip is an extra side of S1 on the wire: client-go's informer
// with a transform that strips managedFields, as ctrlkit's does by default.
const ClientGoStrip = "client-go + strip"

func measurePipeline(ctx context.Context, p pipeline, r *pipelineRun, gate chan struct{}, start time.Time, cpuStart time.Duration,
	endSync func(), cfg PipelineConfig, cost sourceCost, base uint64) (Result, error) {
	err := poll(ctx, 5*time.Minute, time.Millisecond, "informer synced", p.synced)
	endSync()
	if err != nil {
		return nil, err
	}
	synced, syncCPU := time.Since(start), ProcessCPU()-cpuStart
	if err := r.waitSeen(ctx, r.in.initial, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("initial list: %w", err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	reads := r.reads.Load()
	end := func() {}
	if cfg.phase != nil {
		end = cfg.phase("events")
	}
	cpu0, gc0 := ProcessCPU(), GCCPU()
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
	cpu, gc := ProcessCPU()-cpu0, GCCPU()-gc0
	end()
	runtime.ReadMemStats(&after)
	live := liveHeap() // the cache after the churn, the run's input excluded
	n, net := float64(cfg.Events), "_net"
	if cfg.Wire {
		net = ""
	}
	return Result{
		"sync_ms":                ms(synced),
		"sync_cpu_ms":            ms(syncCPU),
		"events_per_sec":         n / elapsed.Seconds(),
		"cpu_us_per_event" + net: float64(cpu.Microseconds())/n - cost.cpu,
		"gc_cpu_us_per_event":    float64(gc.Microseconds()) / n,
		"allocs_per_event" + net: float64(after.Mallocs-before.Mallocs)/n - cost.allocs,
		"bytes_per_event" + net:  float64(after.TotalAlloc-before.TotalAlloc)/n - cost.bytes,
		"reads_per_event":        float64(r.reads.Load()-reads) / n,
		"live_heap_mb":           (float64(live) - float64(base)) / (1 << 20),
		"gc_cycles":              float64(after.NumGC - before.NumGC),
	}, nil
}

// verifyPipeline checks that the side handed the workers only known keys
// and that its cache equals the source.
func verifyPipeline(p pipeline, r *pipelineRun) error {
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
func configMapList(items []corev1.ConfigMap, rv, cont string, remaining *int64) kruntime.Object {
	l := &corev1.ConfigMapList{Items: items}
	l.ResourceVersion, l.Continue, l.RemainingItemCount = rv, cont, remaining
	return l
}

// ctrlkitPipeline: informer.New, handler.EnqueueKey into controller.New's
// queue, controller.Run with the run's workers.
type ctrlkitPipeline struct {
	inf    *informer.SharedIndexInformer[*corev1.ConfigMap]
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   [2]error
}

// seedMetrics, as startCtrlkitPipeline's sampled, asks for the seed path
// with its controller's metrics (CtrlkitMetrics).
const seedMetrics = -2

// startCtrlkitPipeline starts the seed path reporting to observe, or with
// observeName the manager's (startManagerPipeline, tracing the sampled
// share of its reconciles when sampled >= 0); the seed path registers its
// controller's metrics when sampled is seedMetrics.
func startCtrlkitPipeline(ctx context.Context, lw reflector.ListerWatcher[*corev1.ConfigMap],
	observe func(string, *corev1.ConfigMap, bool), observeName func(object.ObjectName, *corev1.ConfigMap, bool), workers int,
	sampled float64) (*ctrlkitPipeline, error) {
	inf, err := informer.New[*corev1.ConfigMap](lw,
		informer.Options[*corev1.ConfigMap]{Name: "configmaps", FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}, DetectMutations: informer.DetectNever}})
	if err != nil {
		return nil, err
	}
	idx := inf.Reader()
	keepNamespaceIndex(idx)
	if observeName != nil {
		return startManagerPipeline(ctx, inf, observeName, workers, sampled)
	}
	copts := controller.Options[string]{Workers: workers}
	if sampled == seedMetrics {
		copts.Name, copts.Registerer = "bench", prometheus.NewRegistry()
	}
	ctrl, err := controller.New[string](controller.ReconcileFunc[string](func(_ context.Context, key string) (controller.Result, error) {
		obj, ok := idx.GetByKey(key)
		observe(key, obj, ok)
		return controller.Result{}, nil
	}), copts)
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

// startManagerPipeline adds a controller of a manager that is never run
// (manager.New makes no request) with For(inf), and runs inf and the
// controller; with sampled >= 0, the manager traces that share of its
// events' reconciles (Options.TraceSampling).
func startManagerPipeline(ctx context.Context, inf *informer.SharedIndexInformer[*corev1.ConfigMap],
	observe func(object.ObjectName, *corev1.ConfigMap, bool), workers int, sampled float64) (*ctrlkitPipeline, error) {
	opts := manager.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HTTPAddr: "0"}
	var tp *sdktrace.TracerProvider
	if sampled >= 0 {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		opts.TracerProvider, opts.TraceSampling = tp, sampled
	}
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, opts)
	if err != nil {
		return nil, err
	}
	idx := inf.Reader()
	ctrl, err := manager.NewController(m, "bench", controller.ReconcileFunc[object.ObjectName](func(_ context.Context, n object.ObjectName) (controller.Result, error) {
		obj, ok := idx.Get(n)
		observe(n, obj, ok)
		return controller.Result{}, nil
	}), manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: workers}}, manager.For(inf))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &ctrlkitPipeline{inf: inf, cancel: cancel}
	p.wg.Go(func() { p.errs[0] = inf.Run(ctx) })
	p.wg.Go(func() {
		p.errs[1] = ctrl.Run(ctx)
		if tp != nil {
			p.errs[1] = errors.Join(p.errs[1], tp.Shutdown(context.WithoutCancel(ctx)))
		}
	})
	return p, nil
}

func (p *ctrlkitPipeline) synced() bool { return p.inf.HasSynced() }
func (p *ctrlkitPipeline) get(key string) (*corev1.ConfigMap, bool) {
	return p.inf.Reader().GetByKey(key)
}
func (p *ctrlkitPipeline) len() int { return p.inf.Reader().Len() }
func (p *ctrlkitPipeline) stop() error {
	p.cancel()
	p.wg.Wait()
	return errors.Join(p.errs[:]...)
}

// clientGoPipeline: NewSharedIndexInformer, an event handler adding keys to
// NewTypedRateLimitingQueue, the run's workers calling GetByKey, Forget and
// Done.
type clientGoPipeline struct {
	inf    cache.SharedIndexInformer
	queue  cgworkqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startClientGoPipeline(ctx context.Context, lw cache.ListerWatcher,
	observe func(string, *corev1.ConfigMap, bool), strip bool, workers int) (*clientGoPipeline, error) {
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if strip {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return nil, err
		}
	}
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
	for range workers {
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
	return p, nil
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
