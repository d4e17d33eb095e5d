package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ctrlkit/ctrlkit/internal/logctx"
	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/tracing"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Reconciler makes the world match the desired state of the object named by
// key. It must be idempotent: it may be called again for the same key at any
// time, and it reads the current state (from a cache) rather than trusting
// the event that queued the key.
type Reconciler[K comparable] interface {
	Reconcile(ctx context.Context, key K) (Result, error)
}

// ReconcileFunc adapts a function to Reconciler.
type ReconcileFunc[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f.
func (f ReconcileFunc[K]) Reconcile(ctx context.Context, key K) (Result, error) { return f(ctx, key) }

// Result tells the controller what to do after a reconcile.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this long
	// (for example, to poll something that sends no events).
	RequeueAfter time.Duration
	// Priority is the queue priority of the key's next reconcile when this
	// one asks for it: RequeueAfter, or the retry after an error (see
	// workqueue.AddOpts.Priority; workqueue.LowPriority for background
	// work). A key queued meanwhile at a higher priority keeps it.
	// Default: 0, as Add.
	Priority int
}

// Options configure a Controller. The zero value means the defaults.
type Options[K comparable] struct {
	// Name identifies the controller in logs and labels its metrics and its
	// queue's metrics. Required with Registerer. Default: "controller".
	Name string
	// Workers is the number of keys reconciled at once. Default: 1.
	Workers int
	// MaxRetries drops a key after it has failed this many times in a row.
	// Default: 0, retry forever (with backoff).
	MaxRetries int
	// ReconcileTimeout bounds each reconcile. Default: no bound.
	ReconcileTimeout time.Duration
	// CacheSyncTimeout is how long Run waits for the caches of WaitFor
	// before it logs, at ERROR, the caches not synced. It keeps waiting
	// after that: a missing CRD or RBAC grant can be fixed without a
	// restart, and the manager's /readyz names the cause meanwhile.
	// Default: 2m.
	CacheSyncTimeout time.Duration
	// ShutdownTimeout bounds the graceful half of shutdown: when Run's
	// context ends, workers take no new keys and in-flight reconciles may
	// finish for this long; then their contexts are cancelled (cause
	// ErrShutdownTimeout). A reconcile that ignores its context is
	// abandoned one second later and Run returns an error naming its key.
	// Default: 30s.
	ShutdownTimeout time.Duration
	// RateLimiter delays retries. Default: workqueue.DefaultControllerRateLimiter.
	RateLimiter workqueue.RateLimiter[K]
	// Gate, if set, holds a key back from the workers while it must wait
	// (read-your-writes: see package ledger), and gives each reconcile its
	// context. Default: none.
	Gate Gate[K]
	// Partition, if set, decides which keys this replica reconciles, when
	// replicas share the work (see package shard, and the manager's
	// Options.Sharding): a key it does not own when a worker takes it is
	// dropped (its owner reconciles it), and an owned key's reconcile runs
	// with the context Partition.Enter returns. Default: every key.
	Partition Partition[K]
	// Clock drives the queue's delays. Default: the real clock.
	Clock workqueue.Clock
	// Fairness sets how the queue's flows share the workers (FlowKey,
	// default: the key's namespace; Quantum) and how keys age (AgingStep).
	// Default: the queue's.
	Fairness workqueue.Fairness[K]
	// Tracer, if set, traces each reconcile: a span whose links name every
	// event merged into it, joined to the trace of an object's sampled
	// traceparent annotation (see package tracing; an unsampled one is
	// only linked, so that it cannot keep the reconcile out of traces).
	// Default: none, and then tracing costs nothing.
	Tracer trace.Tracer
	// TraceSampling, with a Tracer, is the share of events (and requeues,
	// retries and plain adds) drawn for tracing, each by a random draw as
	// it is added (a source that gives causes draws its events itself:
	// Drawn):
	// a reconcile gets a span only if an event merged into it was drawn
	// (or its object's traceparent annotation is sampled), and its span
	// links the drawn events. An event not drawn costs the draw and
	// nothing else: no link kept, no span started. Sampling here, rather
	// than in the TracerProvider's sampler, is what makes a low rate cheap
	// (give the provider ParentBased(AlwaysSample), or its ratio applies
	// on top). Self-triggered reconciles are then counted among the drawn.
	// Values <= 0 or >= 1 mean every event: each reconcile is started as
	// a span and the provider's sampler decides. Default: every event.
	TraceSampling float64
	// LinkTraceparents, with a Tracer, takes an object's traceparent
	// annotation as a claim of whoever wrote the object (anyone who may
	// update an object the controller watches): the reconcile's span
	// starts its own trace and only links the annotation's span, and a
	// sampled annotation does not make the reconcile traced (the draw
	// does). Default: joined, as KEP-5915 means it: the reconcile's span
	// is a child of the annotation's, so the trace a client started goes
	// on through the controller, and an event whose object carries a
	// sampled traceparent is traced whatever TraceSampling says.
	LinkTraceparents bool
	// Writes, with a Tracer, is where the traced writes are recorded (by
	// tracing.Transport), so that a link can name the write that caused
	// its event and a controller's own writes count as self-triggered.
	// The manager sets its own. Default: none (links name no write).
	Writes *tracing.Writes
	// Telemetry: the Logger receives errors, drops and panics, the
	// Registerer the controller's and its queue's metrics.
	telemetry.Telemetry
}

func (o Options[K]) withDefaults() Options[K] {
	if o.Name == "" {
		o.Name = "controller"
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = 2 * time.Minute
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	o.Logger = o.Log().With("controller", o.Name) // every line of the controller's, and its reconciles' (LoggerFrom), names it once
	return o
}

// Gate holds keys back from a controller's workers until what they wait for
// has happened. package ledger's Gate makes a reconcile wait until the
// caches show its own earlier writes.
type Gate[K comparable] interface {
	// Wait reports whether key must wait, and for at most how long; the
	// gate queues the key again (Controller.Add) as soon as it may go, and
	// the controller queues it after atMost in any case.
	Wait(key K) (wait bool, atMost time.Duration)
	// Context returns the context a reconcile of key runs with.
	Context(ctx context.Context, key K) context.Context
}

// Partition tells which keys this replica reconciles now.
type Partition[K comparable] interface {
	// Enter reports whether this replica may reconcile key now. If it may,
	// the reconcile runs with rctx (derived from ctx; it ends early when
	// the replica must stop at once) and done is called when it returns.
	Enter(ctx context.Context, key K) (rctx context.Context, done func(), ok bool)
}

// Controller runs a Reconciler over the keys added to its queue.
type Controller[K comparable] struct {
	rec     Reconciler[K]
	opts    Options[K]
	queue   *workqueue.Queue[K]
	metrics *metrics
	track   tracker[K] // for Stats and KeyStats
	// spanName names the spans of reconciles, with Options.Tracer.
	spanName string

	mu      sync.Mutex // guards sources and synced
	sources []source
	once    run.Once // Run
	synced  bool
	closed  sync.Once
}

// Close retires the controller: it shuts its queue down and unregisters
// its metrics and its queue's, so that another controller of the same name
// can register its own (a controller removed while its manager runs). Call
// it once Run has returned, or instead of Run; calling it again does
// nothing.
func (c *Controller[K]) Close() {
	c.queue.ShutDown()
	c.closed.Do(func() {
		if c.metrics != nil {
			c.metrics.series.Unregister()
		}
	})
}

// source is a cache the controller waits for before starting workers.
type source struct {
	name      string
	hasSynced func() bool
	synced    <-chan struct{} // nil: hasSynced is polled
	lastError func() error    // nil when the cache cannot say
}

// New returns a controller; it starts nothing. It fails if rec is nil or
// metrics cannot be registered.
func New[K comparable](rec Reconciler[K], opts Options[K]) (*Controller[K], error) {
	opts = opts.withDefaults()
	if rec == nil {
		return nil, fmt.Errorf("controller %s: %w", opts.Name, ErrNilReconciler)
	}
	q, err := workqueue.New(workqueue.Options[K]{Name: opts.Name, Registerer: opts.Registerer, RateLimiter: opts.RateLimiter,
		Clock: opts.Clock, Fairness: opts.Fairness})
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", opts.Name, err)
	}
	m, err := newMetrics(opts.Telemetry, opts.Name, opts.Workers)
	if err != nil {
		q.ShutDown()
		return nil, fmt.Errorf("controller %s: %w", opts.Name, err)
	}
	c := &Controller[K]{rec: rec, opts: opts, queue: q, metrics: m}
	c.track.epoch = time.Now()
	c.track.running = make([]running[K], opts.Workers)
	if opts.Tracer != nil {
		c.track.tracing, c.spanName = true, "reconcile "+opts.Name
		c.track.linkOnly = opts.LinkTraceparents
		if p := opts.TraceSampling; p > 0 && p < 1 {
			c.track.drawBelow = uint64(p * (1 << 63) * 2) // exact for p < 1: below 2^64
		}
	}
	return c, nil
}

// Add queues key for reconciliation. Event handlers call it (it satisfies
// handler.Adder). It never blocks; safe for concurrent use.
func (c *Controller[K]) Add(key K) {
	c.track.drawPlain(key)
	c.queue.Add(key)
}

// AddWithPriority queues key at priority (see workqueue.AddOpts.Priority).
// It satisfies handler.PriorityAdder, so the enqueue helpers queue the
// initial list and resyncs at workqueue.LowPriority. It never blocks; safe for
// concurrent use.
func (c *Controller[K]) AddWithPriority(key K, priority int) {
	c.track.drawPlain(key)
	c.queue.AddWithPriority(key, priority)
}

// AddBatch queues keys in order at priority, under one lock of the queue
// (handler.BatchAdder: an informer's batch of events). It never blocks;
// safe for concurrent use.
func (c *Controller[K]) AddBatch(keys []K, priority int) {
	c.track.drawPlain(keys...)
	c.queue.AddBatch(keys, priority)
}

// Reserve makes room in the queue for about n new keys
// (workqueue.Queue.Reserve, handler.Reserver). Safe for concurrent use.
func (c *Controller[K]) Reserve(n int) { c.queue.Reserve(n) }

// NeverBlocks declares that Add, AddWithPriority and AddBatch never wait on
// anything but the queue's short lock (handler.NonBlockingAdder).
func (c *Controller[K]) NeverBlocks() {}

// Queue returns the controller's work queue, for AddAfter and inspection.
func (c *Controller[K]) Queue() *workqueue.Queue[K] { return c.queue }

// WaitFor makes Run wait, before starting workers, until hasSynced reports
// true; name appears in the log line after CacheSyncTimeout with
// lastError's error, if lastError is not nil (an informer's LastError says
// why it has not synced). Call it before Run, typically with each event
// handler registration's HasSynced.
//
// Run polls hasSynced every 50ms; WaitForSynced takes a channel instead,
// and the workers start the moment it closes.
func (c *Controller[K]) WaitFor(name string, hasSynced func() bool, lastError func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, source{name: name, hasSynced: hasSynced, lastError: lastError})
}

// WaitForSynced is WaitFor with a channel closed once the cache has synced
// (informer.Registration.Synced): Run waits on it rather than polling, so
// the workers start as soon as the last of their caches synced.
func (c *Controller[K]) WaitForSynced(name string, synced <-chan struct{}, lastError func() error) {
	hasSynced := func() bool {
		select {
		case <-synced:
			return true
		default:
			return false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, source{name: name, hasSynced: hasSynced, synced: synced, lastError: lastError})
}

// Errors of New and Run; classify them with errors.Is.
var (
	// ErrNilReconciler reports New without a Reconciler.
	ErrNilReconciler = errors.New("controller: nil reconciler")
	// ErrShutdownTimeout is the cause of the reconcile contexts cancelled
	// when ShutdownTimeout ran out, and wraps Run's error when a reconcile
	// ignored that cancellation.
	ErrShutdownTimeout = errors.New("controller: shutdown timeout")
	// ErrStopNow, as the cause of Run's context (context.WithCancelCause),
	// skips the graceful half of shutdown: in-flight reconciles are
	// cancelled at once, with ErrStopNow as their cause. Leader election
	// uses it when the lease is lost.
	ErrStopNow = errors.New("controller: stop now")
	// ErrStarted reports a second call to Run. It is the same value as
	// the other packages' ErrStarted.
	ErrStarted = run.ErrStarted
)

// abandonAfter is how long Run waits for reconciles after cancelling them.
const abandonAfter = time.Second

// Run waits for the caches, then reconciles keys with Options.Workers
// workers until ctx ends. Shutdown has two steps: workers stop taking keys
// and in-flight reconciles finish within ShutdownTimeout, then their
// contexts are cancelled. Run returns nil once every goroutine it started
// has exited; an error wrapping ErrShutdownTimeout if a reconcile ignored
// its cancelled context (its goroutine is left behind). It can be called
// once.
func (c *Controller[K]) Run(ctx context.Context) error {
	c.mu.Lock()
	if err := c.once.Start("controller " + c.opts.Name); err != nil {
		c.mu.Unlock()
		return err
	}
	sources := append([]source(nil), c.sources...)
	c.mu.Unlock()
	defer c.queue.ShutDown()

	c.waitForSync(ctx, sources)
	if ctx.Err() != nil {
		return nil
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	c.opts.Logger.Info("controller: caches synced, starting workers", "workers", c.opts.Workers)
	// Reconciles run under work, which outlives ctx by up to ShutdownTimeout.
	work, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	// Once, not per reconcile: the writes made with it name their
	// controller (in spans, and in the records of perturb's trials).
	work = tracing.WithController(work, c.opts.Name)
	work = logctx.With(work, c.opts.Logger)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.opts.Workers {
		wg.Go(func() { c.worker(ctx, work, i) })
	}
	go func() { wg.Wait(); close(done) }()
	<-ctx.Done()
	c.queue.ShutDown() // idle workers return; busy ones finish their key
	return c.drain(ctx, stop, done)
}

// drain is the second half of Run's shutdown: wait for in-flight reconciles,
// cancel them at the bound (at once for ErrStopNow), give up soon after.
func (c *Controller[K]) drain(ctx context.Context, stop context.CancelCauseFunc, done <-chan struct{}) error {
	if errors.Is(context.Cause(ctx), ErrStopNow) {
		stop(ErrStopNow)
	}
	bound := time.NewTimer(c.opts.ShutdownTimeout)
	defer bound.Stop()
	select {
	case <-done:
		return nil
	case <-bound.C:
	}
	stop(ErrShutdownTimeout)
	c.opts.Logger.Warn("controller: shutdown timeout; cancelling in-flight reconciles",
		"timeout", c.opts.ShutdownTimeout, "keys", c.InFlight())
	abandon := time.NewTimer(abandonAfter)
	defer abandon.Stop()
	select {
	case <-done:
		return nil
	case <-abandon.C:
		return fmt.Errorf("controller %s: %w: reconciles of %v ignored their cancelled context; abandoned",
			c.opts.Name, ErrShutdownTimeout, c.InFlight())
	}
}

// InFlight returns the keys being reconciled now. Safe for concurrent use.
func (c *Controller[K]) InFlight() []K { return c.track.inFlight() }

// HasSynced reports that every cache of WaitFor has synced, whether or not
// Run has started the workers (a warm standby's caches sync too). Safe for
// concurrent use.
func (c *Controller[K]) HasSynced() bool {
	c.mu.Lock()
	sources := append([]source(nil), c.sources...)
	c.mu.Unlock()
	for _, s := range sources {
		if !s.hasSynced() {
			return false
		}
	}
	return true
}

// Name returns the controller's name.
func (c *Controller[K]) Name() string { return c.opts.Name }

// waitForSync waits until all sources have synced or ctx ends: on the
// channel of the first that has not (WaitForSynced), and polling every 50ms
// while one given by WaitFor has not. After CacheSyncTimeout it logs the
// laggards once and goes on waiting.
func (c *Controller[K]) waitForSync(ctx context.Context, sources []source) {
	deadline := time.NewTimer(c.opts.CacheSyncTimeout)
	defer deadline.Stop()
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		var (
			wake <-chan struct{}
			poll <-chan time.Time
		)
		for _, s := range sources {
			switch {
			case s.hasSynced():
			case s.synced != nil:
				if wake == nil {
					wake = s.synced
				}
			default:
				if tick == nil {
					tick = time.NewTicker(50 * time.Millisecond)
				}
				poll = tick.C
			}
		}
		if wake == nil && poll == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			c.opts.Logger.Error("controller: caches not synced; still waiting",
				"after", c.opts.CacheSyncTimeout, "caches", notSynced(sources))
		case <-wake:
		case <-poll:
		}
	}
}

// notSynced names the sources not synced, each with its last error.
func notSynced(sources []source) []string {
	var waiting []string
	for _, s := range sources {
		if s.hasSynced() {
			continue
		}
		var err error
		if s.lastError != nil {
			err = s.lastError()
		}
		if err != nil {
			waiting = append(waiting, fmt.Sprintf("%s (%v)", s.name, err))
		} else {
			waiting = append(waiting, s.name)
		}
	}
	return waiting
}

// worker processes keys until the queue shuts down. Once ctx has ended it
// takes no new work: keys still queued are marked done unprocessed.
// Reconciles run under work; id is the worker's slot in the tracker. It
// marks each key done as it takes the next (Queue.DoneAndGet: one lock,
// and no other worker woken for the key it takes itself).
func (c *Controller[K]) worker(ctx, work context.Context, id int) {
	key, shutdown := c.queue.Get()
	for !shutdown {
		c.handle(ctx, work, key, id)
		key, shutdown = c.queue.DoneAndGet(key)
	}
}

// handle does a worker's part for key, which the queue handed out, but
// marking it done: reconcile it, or hold it back (read-your-writes), or
// drop it (another replica's; Run ending).
func (c *Controller[K]) handle(ctx, work context.Context, key K, id int) {
	if ctx.Err() != nil {
		return
	}
	if c.opts.Gate != nil {
		if wait, atMost := c.opts.Gate.Wait(key); wait {
			c.requeue(key, "held for read-your-writes", c.track.now(), atMost, 0, trace.SpanContext{})
			c.metrics.gated()
			return
		}
	}
	rctx, done := work, func() {}
	if c.opts.Partition != nil {
		var ok bool
		if rctx, done, ok = c.opts.Partition.Enter(work, key); !ok {
			c.queue.Forget(key)
			c.metrics.drop(dropNotOwned)
			return
		}
	}
	c.metrics.workerBusy(1)
	c.process(rctx, key, id)
	c.metrics.workerBusy(-1)
	done()
}

// LoggerFrom returns the logger of the reconcile ctx belongs to: its
// controller's Options.Logger (with the attribute controller=NAME) and
// the attribute key=KEY, the key being reconciled, as controller-runtime's
// log.FromContext gives a reconciler a logger naming its object. Outside a
// reconcile it returns slog.Default(). Each call makes a logger with the
// key (a reconcile that never asks pays only for the key in its context):
// call it once per reconcile and keep it.
func LoggerFrom(ctx context.Context) *slog.Logger { return logctx.From(ctx) }
