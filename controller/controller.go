package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// Result tells the controller what to do after a successful reconcile.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this long
	// (for example, to poll something that sends no events).
	RequeueAfter time.Duration
}

// Options configure a Controller. The zero value means the defaults.
type Options[K comparable] struct {
	// Name identifies the controller in logs and labels its metrics and its
	// queue's metrics. Required with Registerer. Default: "controller".
	Name string
	// MaxRetries drops a key after it has failed this many times in a row.
	// Default: 0, retry forever (with backoff).
	MaxRetries int
	// ReconcileTimeout bounds each reconcile. Default: no bound.
	ReconcileTimeout time.Duration
	// CacheSyncTimeout bounds Run's wait for the caches of WaitFor; Run
	// then fails naming the caches not synced. Default: 2m.
	CacheSyncTimeout time.Duration
	// RateLimiter delays retries. Default: workqueue.DefaultControllerRateLimiter.
	RateLimiter workqueue.RateLimiter[K]
	// Clock drives the queue's delays. Default: the real clock.
	Clock workqueue.Clock
	// Logger receives errors, drops and panics. Default: discard.
	Logger *slog.Logger
	// Registerer receives the controller's and its queue's metrics.
	// Default: no metrics.
	Registerer prometheus.Registerer
}

func (o Options[K]) withDefaults() Options[K] {
	if o.Name == "" {
		o.Name = "controller"
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Controller runs a Reconciler over the keys added to its queue.
type Controller[K comparable] struct {
	rec     Reconciler[K]
	opts    Options[K]
	queue   *workqueue.Queue[K]
	metrics *metrics

	mu      sync.Mutex // guards sources and running
	sources []source
	running bool
}

// source is a cache the controller waits for before starting workers.
type source struct {
	name      string
	hasSynced func() bool
}

// New returns a controller; it starts nothing. It fails only if metrics
// cannot be registered.
func New[K comparable](rec Reconciler[K], opts Options[K]) (*Controller[K], error) {
	opts = opts.withDefaults()
	q, err := workqueue.New(workqueue.Options[K]{
		Name: opts.Name, Metrics: opts.Registerer, RateLimiter: opts.RateLimiter, Clock: opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", opts.Name, err)
	}
	m, err := newMetrics(opts.Registerer, opts.Name)
	if err != nil {
		q.ShutDown()
		return nil, fmt.Errorf("controller %s: %w", opts.Name, err)
	}
	return &Controller[K]{rec: rec, opts: opts, queue: q, metrics: m}, nil
}

// Add queues key for reconciliation. Event handlers call it (it satisfies
// handler.Adder). It never blocks; safe for concurrent use.
func (c *Controller[K]) Add(key K) { c.queue.Add(key) }

// Queue returns the controller's work queue, for AddAfter and inspection.
func (c *Controller[K]) Queue() *workqueue.Queue[K] { return c.queue }

// WaitFor makes Run wait, before starting workers, until hasSynced reports
// true; name appears in Run's error if it never does. Call it before Run,
// typically with each event handler registration's HasSynced.
func (c *Controller[K]) WaitFor(name string, hasSynced func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, source{name: name, hasSynced: hasSynced})
}

// errAlreadyRunning is returned by a second Run.
var errAlreadyRunning = errors.New("controller: Run called twice")

// Run waits for the caches, then reconciles keys with the given number of
// workers until ctx ends. It returns nil after a clean shutdown (every
// goroutine it started has exited), or an error if the caches did not sync
// in time. It can be called once.
func (c *Controller[K]) Run(ctx context.Context, workers int) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errAlreadyRunning
	}
	c.running = true
	sources := append([]source(nil), c.sources...)
	c.mu.Unlock()
	defer c.queue.ShutDown()

	if err := c.waitForSync(ctx, sources); err != nil || ctx.Err() != nil {
		return err
	}
	c.opts.Logger.Info("controller: caches synced, starting workers", "name", c.opts.Name, "workers", workers)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() { c.worker(ctx) })
	}
	<-ctx.Done()
	c.queue.ShutDown() // wakes idle workers; busy ones finish their key
	wg.Wait()
	return nil
}

// waitForSync polls the sources until all have synced, ctx ends (nil), or
// CacheSyncTimeout passes (an error naming the laggards).
func (c *Controller[K]) waitForSync(ctx context.Context, sources []source) error {
	deadline := time.NewTimer(c.opts.CacheSyncTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting []string
		for _, s := range sources {
			if !s.hasSynced() {
				waiting = append(waiting, s.name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return fmt.Errorf("controller %s: caches not synced after %s: %v", c.opts.Name, c.opts.CacheSyncTimeout, waiting)
		case <-tick.C:
		}
	}
}

// worker processes keys until the queue shuts down. Once ctx has ended it
// takes no new work: keys still queued are marked done unprocessed.
func (c *Controller[K]) worker(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		if ctx.Err() != nil {
			c.queue.Done(key)
			continue
		}
		c.metrics.workerBusy(1)
		c.process(ctx, key)
		c.metrics.workerBusy(-1)
	}
}
