package workqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Queue. The zero value is ready to use: no metrics,
// the default controller rate limiter, the system clock.
type Options[K comparable] struct {
	// Name labels the queue's metrics (as both "name" and "controller"). It
	// is required when Registerer is set, and must differ between queues
	// sharing a registry. Default: "".
	Name string
	// Registerer receives the queue's Prometheus metrics (workqueue_depth,
	// workqueue_adds_total, ...) when the queue is created; ShutDown
	// unregisters them. Default: nil, no metrics and no cost.
	Registerer prometheus.Registerer
	// RateLimiter decides AddRateLimited's delays. The queue serializes its
	// calls, so it need not be safe for concurrent use, but it must not be
	// shared with another queue. Default: DefaultControllerRateLimiter[K]().
	RateLimiter RateLimiter[K]
	// Clock is the source of time for delays, aging and metrics. Default:
	// the system clock.
	Clock Clock
	// Fairness: how flows of one priority share the workers, and how
	// waiting keys age.
	Fairness[K]
}

// Fairness configures how a queue shares its workers: within a priority
// band, flows share it in rounds; a waiting key's priority rises with age.
type Fairness[K comparable] struct {
	// FlowKey names the flow of a key: within a priority band, keys go out
	// in rounds, up to Quantum keys of each flow per round. It is called
	// without the queue's lock on every add, so it must be cheap, and it
	// must always give a key the same flow. Default: the namespace of
	// "namespace/name" string keys and of struct keys with a string
	// Namespace field (object.ObjectName); keys of other types share one
	// flow.
	FlowKey func(K) string
	// Quantum is how many keys a flow is handed out per round. Within a
	// round keys go out in the order they were queued; a flow that has had
	// Quantum keys waits for the next round, which starts once no other
	// flow has keys left in this one. So the order is first in, first out
	// except where a flow had its share of a round, and the key at the
	// head of a flow waits for at most Quantum keys of each other flow
	// (2 * Quantum when its own flow had its share of the round already),
	// however many those hold. Values <= 0 mean the default. Default:
	// DefaultQuantum.
	Quantum int
	// AgingStep is how long a key must wait for its effective priority to
	// rise by one; see AddOpts.Priority. Values <= 0 mean the default.
	// Default: 100ms, so a LowPriority key takes turns with priority-0
	// keys once it has waited 10s.
	AgingStep time.Duration
	// MaxInFlight caps the keys of one flow handed out and not yet Done:
	// a flow at its cap waits, and the other flows' keys go out, until
	// one of its keys is Done (it then takes its turn in the current
	// round). Set below the number of workers, it keeps workers free for
	// the other flows: a flow's burst, however long, then never makes the
	// keys of the others wait for a reconcile to end (package fleet keeps
	// a quarter of its workers so for the other clusters). The cost: while
	// only capped flows have keys, the workers above the cap wait. With a
	// cap, Done calls FlowKey too. Values <= 0 mean no cap. Default: none.
	MaxInFlight int
}

// DefaultAgingStep is Options.AgingStep's default.
const DefaultAgingStep = 100 * time.Millisecond

// DefaultQuantum is Options.Quantum's default: a namespace with a few keys
// queued at once gets them out in arrival order, and a namespace with
// 100,000 delays another one's first key by at most 4 keys (8 if that
// namespace had its share of the round already).
const DefaultQuantum = 4

func (o Options[K]) withDefaults() Options[K] {
	if o.RateLimiter == nil {
		o.RateLimiter = DefaultControllerRateLimiter[K]()
	}
	if o.Clock == nil {
		o.Clock = newRealClock()
	}
	if o.FlowKey == nil {
		o.FlowKey = defaultFlowKey[K]()
	}
	if o.AgingStep <= 0 {
		o.AgingStep = DefaultAgingStep
	}
	if o.Quantum <= 0 {
		o.Quantum = DefaultQuantum
	}
	return o
}

// LowPriority is the priority for background work, such as the keys of an
// informer's initial list and of resyncs: below Add's 0, and aged up to it
// after 100 aging steps (10s by default). See AddOpts.Priority.
const LowPriority = -100

// AddOpts are the options of AddWithOpts. The zero value is a plain Add.
type AddOpts struct {
	// Priority orders the keys waiting at once: 0 is Add's, negative is
	// background work (LowPriority), positive is urgent. Keys of one
	// priority form a band; within a band, keys go out in the order they
	// were queued, up to Options.Quantum keys of each flow (see
	// Options.FlowKey) a round, so a flow's key waits for a few keys of
	// each other flow, not for all of them.
	//
	// Across bands the highest goes first, with aging: once the oldest
	// key of a band of priority q has waited (p - q) * Options.AgingStep,
	// where p is the highest priority waiting, that band takes turns with
	// band p (and with every other band so aged), one key each, until it
	// has no key that old left. That is the bound: under any load of
	// higher-priority keys, a band waits at most (p - q) * AgingStep before
	// it gets at least one of every n hand-outs (n the number of bands
	// waiting). Use a few bands, not many values.
	Priority int
	// After delays the add; an add that is due later changes nothing in
	// the queue until then. A key waiting for two delayed adds keeps the
	// earlier time and the higher priority. After <= 0 adds now.
	After time.Duration
	// RateLimited delays the add by what the queue's RateLimiter gives the
	// key (at least After) and counts a retry, as AddRateLimited does.
	RateLimited bool
}

// Queue is a work queue of keys for controllers: producers Add keys that
// need work, workers Get a key, process it and call Done.
//
// It guarantees that a key waits at most once (adding a queued key again
// does nothing), that no two workers hold the same key at once, and that a
// key added while a worker holds it is handed out again after Done. Keys are
// handed out highest priority first (with aging, so no priority starves),
// flows (namespaces) taking turns within a priority, and in the order they
// were first added within a flow; see AddOpts.Priority. AddAfter and
// AddRateLimited add a key later; Forget and NumRequeues manage the rate
// limiter's memory of a key's failures.
//
// All methods are safe for concurrent use. After ShutDown the queue hands
// out what it still holds and then tells workers to stop; see ShutDown.
type Queue[K comparable] struct {
	clock   Clock
	metrics *metrics // nil when metrics are off
	delay   *delayer[K]
	flowKey func(K) string

	// mu guards core, shuttingDown and drainedClosed; cond (on mu) wakes
	// workers blocked in Get. Invariant: drained is closed exactly when
	// shuttingDown and core is idle.
	mu            sync.Mutex
	cond          sync.Cond
	core          core[K]
	shuttingDown  bool
	drainedClosed bool
	drained       chan struct{}
	// forced, guarded by mu, is what the ShutDownWithDrain calls waiting
	// now wait on besides drained: ShutDown closes it (and a drain that
	// starts later makes a new one), so they stop waiting, as client-go's
	// do; nil when none waits (see markShutDown).
	forced chan struct{}

	// limitMu serializes the calls to limiter, which need not be safe for
	// concurrent use when it is the caller's own (see RateLimiter).
	limitMu sync.Mutex
	limiter RateLimiter[K]

	stopOnce sync.Once

	// For saturated and yieldIfSaturated, read and written without mu
	// (yielded is safe for concurrent use): born is when the queue
	// was made (the system clock's monotonic reading); waited is when,
	// counted from born, a Get that had to wait for a key last stopped
	// waiting (0, as if at born, until one has); waiting counts the Gets
	// waiting now. yielded holds *yieldClocks, each when, counted from
	// born, a Get last yielded: a sync.Pool keeps one per processor in
	// practice (its private slot), so a Get finds the clock of the
	// processor it runs on. yield is runtime.Gosched; both are replaced in
	// tests (a pool drops items at random under the race detector).
	born    time.Time
	waited  atomic.Int64
	waiting atomic.Int32
	yielded interface {
		Get() any
		Put(any)
	}
	yield func()
	// wake wakes one worker waiting in Get: cond.Signal, replaced in tests
	// to count the wake-ups.
	wake func()
	// calm is when, counted from born, Gets may yield again after a slow
	// yield (see yieldSlow).
	calm atomic.Int64
}

// yieldClock is when, counted from a queue's born, a Get last yielded.
type yieldClock struct{ at time.Duration }

// New returns an empty queue. It starts no goroutine: the one that handles
// delayed keys starts on the first AddAfter or AddRateLimited and is joined
// by ShutDown. New fails only when metrics cannot be registered.
func New[K comparable](opts Options[K]) (*Queue[K], error) {
	opts = opts.withDefaults()
	q := &Queue[K]{
		clock:   opts.Clock,
		born:    time.Now(),
		yield:   runtime.Gosched,
		yielded: &sync.Pool{New: func() any { return new(yieldClock) }},
		drained: make(chan struct{}),
		limiter: opts.RateLimiter,
		flowKey: opts.FlowKey,
	}
	q.core.init(opts.Registerer != nil, opts.AgingStep, opts.Quantum, max(opts.MaxInFlight, 0))
	q.cond.L = &q.mu
	q.wake = q.cond.Signal
	q.delay = newDelayer(opts.Clock, q.add)
	if opts.Registerer != nil {
		if opts.Name == "" {
			return nil, errors.New("workqueue: Options.Registerer needs Options.Name")
		}
		m := newMetrics(opts.Registerer, opts.Name, (*queueProgress[K])(q))
		if err := m.series.Register(); err != nil {
			return nil, fmt.Errorf("workqueue: registering metrics of queue %q: %w", opts.Name, err)
		}
		q.metrics = m
	}
	return q, nil
}

// now returns the time for the bookkeeping, or the zero time when nobody
// will read it: metrics are off and at most one band is waiting, so no band
// ages. Aging needs Get and Done to move the core's time forward too, or a
// burst of higher-priority keys added at once would hold a low band back
// until it drained, whatever its wait.
func (q *Queue[K]) now() time.Time {
	if q.metrics == nil && !q.core.multi.Load() {
		return time.Time{}
	}
	return q.clock.Now()
}

// Add queues k unless it is already waiting. If a worker holds k, k is
// handed out again after that worker calls Done. Add is ignored after
// ShutDown. It does not block (beyond a short lock); safe for concurrent use.
func (q *Queue[K]) Add(k K) { q.add(k, 0) }

// NeverBlocks declares that Add, AddWithPriority and AddBatch never wait on
// anything but the queue's own short lock (handler.NonBlockingAdder): an
// informer may then add keys on its own goroutine.
func (q *Queue[K]) NeverBlocks() {}

// clampPriority fits a priority into the 32 bits the queue keeps.
func clampPriority(p int) int32 {
	return int32(min(max(p, math.MinInt32), math.MaxInt32))
}

// addTime is the time keys added at prio are stamped with: read from the
// clock for a band other than 0 (its age matters once another band waits),
// else as now says.
func (q *Queue[K]) addTime(prio int32) time.Time {
	if prio != 0 {
		return q.clock.Now()
	}
	return q.now()
}

// add is Add at priority prio. It reads the clock only when something will
// use the time: metrics, a band other than 0, or two bands waiting.
func (q *Queue[K]) add(k K, prio int32) {
	q.addChunk([]K{k}, []string{q.flowKey(k)}, prio)
}

// addChunk adds keys, whose flows are flows, at prio under one lock, then
// wakes one waiting worker per key queued that a worker can get (not of a
// flow at its in-flight cap: the Done that takes it below wakes one). A Get
// counts itself waiting under the lock, before it waits. It reports false
// after ShutDown.
func (q *Queue[K]) addChunk(keys []K, flows []string, prio int32) bool {
	now := q.addTime(prio)
	dirtied, queued := 0, 0
	q.mu.Lock()
	if q.shuttingDown {
		q.mu.Unlock()
		return false
	}
	for n, k := range keys {
		d, qd := q.core.add(k, prio, flows[n], now)
		if d {
			dirtied++
		}
		if qd && (q.core.full == nil || !q.core.full(flows[n])) {
			queued++
		}
	}
	q.mu.Unlock()
	for range min(queued, int(q.waiting.Load())) {
		q.wake()
	}
	q.metrics.added(dirtied)
	return true
}

// Get blocks until a key is queued and hands it out; the caller must call
// Done(k) when it has finished with it. After ShutDown, Get keeps handing
// out the keys still queued and returns shutdown=true (and the zero key)
// only once none is left. Safe for concurrent use.
//
// While the workers are saturated (no Get is waiting for a key and none
// stopped waiting in the last 100µs), a Get yields its processor to any
// goroutine waiting for one, unless a Get of this queue on the same
// processor yielded in the last 10µs: workers that are busy on every processor otherwise keep
// the goroutines that feed the queue (event handlers, a producer woken by a
// timer) waiting until the runtime preempts a worker, about 10ms, and the
// keys they owe then arrive in a burst. Each processor yields: it runs its
// own timers and the goroutines it woke only when it schedules. Keys that
// take longer than 10µs to process are each preceded by a yield; keys
// processed faster share one, whose cost would otherwise exceed their own.
// While workers keep up, Get does not yield: a yield then only lets a
// feeder add its burst before the keys already queued are handed out.
// Nor does it yield for a while after a yield that kept its processor
// away for long (see yieldSlow): the goroutines it yielded to do not give
// processors back soon (busy neighbours, producers that never wait), so
// yielding only queues the worker behind them.
func (q *Queue[K]) Get() (k K, shutdown bool) {
	q.yieldIfSaturated()
	q.mu.Lock()
	return q.getLocked(nil)
}

// DoneAndGet is Done(k) then Get, under one lock: a worker's step from the
// key it has finished with to its next. Where Done would wake a waiting
// worker (k was added again meanwhile, or its flow fell below its
// in-flight cap) and this worker then takes a key at once, it wakes
// nobody: the woken worker would find that key gone. It yields as Get
// does, before it takes the lock (k's work is timed to before the yield,
// and k holds its flow's in-flight slot through it). Safe for concurrent
// use.
func (q *Queue[K]) DoneAndGet(k K) (next K, shutdown bool) {
	var flow string
	if q.core.full != nil {
		flow = q.flowKey(k)
	}
	now := q.now() // k's work ends here, not after the yield
	q.yieldIfSaturated()
	q.mu.Lock()
	started, wake, ok := q.core.done(k, flow, now)
	q.closeIfDrainedLocked()
	record := func() {
		if wake {
			q.wake() // this worker takes nothing now: another may
			wake = false
		}
		if ok && q.metrics != nil {
			q.metrics.finished(now.Sub(started))
			ok = false
		}
	}
	next, shutdown = q.getLocked(record)
	if !shutdown {
		// This worker took a key without waiting (the idle hook, had it
		// run, sent the wake already): Done made at most one key
		// takeable, and a worker took one. Another woken now would find
		// nothing, on every step of a capped flow with a backlog.
		wake = false
	}
	record()
	return next, shutdown
}

// getLocked is Get once it holds q.mu, which it releases. idle, if not
// nil, runs once without the lock before the first wait; the loop then
// looks again.
func (q *Queue[K]) getLocked(idle func()) (k K, shutdown bool) {
	var (
		now   time.Time
		since time.Time
		ok    bool
		waits bool
	)
	for {
		if q.core.queued > 0 || q.shuttingDown {
			now = q.now() // under the lock: the key is handed out now
			// Nothing to get with keys queued: every one's flow is at its
			// in-flight cap; a Done wakes a worker when that changes.
			if k, since, ok = q.core.get(now); ok || q.shuttingDown {
				break
			}
		}
		if idle != nil {
			q.mu.Unlock()
			idle()
			idle = nil
			q.mu.Lock()
			continue
		}
		if !waits {
			waits = true
			q.waiting.Add(1)
		}
		q.cond.Wait()
	}
	q.mu.Unlock()
	if waits {
		q.waited.Store(int64(time.Since(q.born))) // idle until now
		q.waiting.Add(-1)
	}
	if !ok {
		return k, true
	}
	if q.metrics != nil {
		q.metrics.handedOut(now.Sub(since))
	}
	return k, false
}

const (
	// yieldAfter is how long workers may go without waiting in Get before
	// Get yields: far below the runtime's 10ms preemption, above the time
	// workers that keep up take to drain a burst of adds.
	yieldAfter = 100 * time.Microsecond
	// yieldEvery is the time between two yields of a queue's Gets on one
	// processor: about the longest a feeder waits for a processor while
	// workers are saturated, and many times a yield's own cost (a trip
	// through the scheduler, a fraction of a microsecond). A yield comes
	// early at times (a goroutine that moved to another processor, a clock
	// the pool dropped in a collection and made anew).
	yieldEvery = 10 * time.Microsecond
	// yieldSlow is how long a yield may keep its Get away from the
	// processor and still pay: feeders run a short while and wait again.
	// A slower yield was spent behind goroutines that keep processors
	// until the runtime preempts them, and Gets then do not yield for
	// yieldCalm times as long after it (at most maxCalm): each yield would
	// cost the worker as much, for keys that are late anyway.
	yieldSlow = 100 * time.Microsecond
	yieldCalm = 100
	maxCalm   = time.Second
)

// saturated reports whether, at now (counted from born), no Get is waiting
// for a key and none stopped waiting in the last yieldAfter: every worker
// has been busy since, so goroutines that feed the queue may be waiting for
// a processor.
func (q *Queue[K]) saturated(now time.Duration) bool {
	return q.waiting.Load() == 0 && now-time.Duration(q.waited.Load()) > yieldAfter
}

// yieldIfSaturated yields the processor if the workers are saturated and no
// Get yielded it in the last yieldEvery. The pool hands a goroutine the
// clock of the processor it runs on (another's or a new one at times: a
// yield then comes early or late, never lost for long). It
// reads the system's monotonic clock, not Options.Clock: it is about the
// processors of this process, not the queue's time.
func (q *Queue[K]) yieldIfSaturated() {
	now := time.Since(q.born)
	if !q.saturated(now) || now < time.Duration(q.calm.Load()) {
		return
	}
	c := q.yielded.Get().(*yieldClock)
	due := now-c.at >= yieldEvery
	if due {
		c.at = now
	}
	q.yielded.Put(c)
	if !due {
		return
	}
	q.yield()
	end := time.Since(q.born)
	if took := end - now; took > yieldSlow {
		q.calmUntil(end + min(took*yieldCalm, maxCalm))
	}
}

// calmUntil moves calm to until if that is later: a shorter calm set by
// another worker's yield does not cut this one.
func (q *Queue[K]) calmUntil(until time.Duration) {
	for {
		c := q.calm.Load()
		if c >= int64(until) || q.calm.CompareAndSwap(c, int64(until)) {
			return
		}
	}
}

// Done tells the queue that the worker has finished with k, which Get
// handed out. If k was added meanwhile it is queued again. Done for a key
// that is not being processed does nothing. It does not block; safe for
// concurrent use.
func (q *Queue[K]) Done(k K) {
	var flow string
	if q.core.full != nil {
		flow = q.flowKey(k)
	}
	now := q.now()
	q.mu.Lock()
	started, wake, ok := q.core.done(k, flow, now)
	q.closeIfDrainedLocked()
	q.mu.Unlock()
	if wake {
		q.wake()
	}
	if ok && q.metrics != nil {
		q.metrics.finished(now.Sub(started))
	}
}

// Len returns the number of keys queued for Get (keys re-added while being
// processed are not counted until Done). Safe for concurrent use.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.queued
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain has been
// called. Safe for concurrent use.
func (q *Queue[K]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}

// ShutDown makes the queue ignore further adds and wakes every worker:
// workers get the keys still queued, then shutdown=true. Keys waiting in
// AddAfter's delay are dropped, and the queue's metrics are unregistered.
// It blocks only until the delay goroutine has exited (promptly), and does
// not wait for workers; see ShutDownWithDrain. Safe for concurrent use and to call more than once.
func (q *Queue[K]) ShutDown() {
	q.markShutDown(false)
	q.stop()
}

// markShutDown stops adds, wakes every worker and drops delayed keys. For
// a drain it returns the channel that a ShutDown while it waits closes;
// else it closes the one the drains waiting now hold.
func (q *Queue[K]) markShutDown(drain bool) (forced <-chan struct{}) {
	q.mu.Lock()
	q.shuttingDown = true
	q.closeIfDrainedLocked()
	switch {
	case drain && q.forced == nil:
		q.forced = make(chan struct{})
	case !drain && q.forced != nil:
		close(q.forced)
		q.forced = nil
	}
	forced = q.forced
	q.mu.Unlock()
	q.cond.Broadcast()
	q.delay.stop()
	return forced
}

// ShutDownWithDrain is ShutDown, then blocks until every queued key has
// been handed out and every handed-out key is Done, until ctx ends, or
// until ShutDown is called while it waits (it forces the shutdown, as
// client-go's ShutDown during a ShutDownWithDrain does; one called before
// does not). It returns nil once drained, else the context's error or
// ErrDrainAbandoned (the queue is shut down either way). The metrics are
// unregistered when it returns. Safe for concurrent use.
func (q *Queue[K]) ShutDownWithDrain(ctx context.Context) error {
	forced := q.markShutDown(true)
	defer q.stop()
	var err error
	select {
	case <-q.drained:
		return nil
	case <-forced:
		err = ErrDrainAbandoned
	case <-ctx.Done():
		err = ctx.Err()
	}
	select {
	case <-q.drained: // both ready: report success
		return nil
	default:
		return err
	}
}

// ErrDrainAbandoned is ShutDownWithDrain's error when ShutDown was called
// while it waited for the queue to drain.
var ErrDrainAbandoned = errors.New("workqueue: ShutDown was called while ShutDownWithDrain waited for the queue to drain")

// stop unregisters the metrics, once.
func (q *Queue[K]) stop() {
	q.stopOnce.Do(func() {
		if q.metrics != nil {
			q.metrics.series.Unregister()
		}
	})
}

// closeIfDrainedLocked closes drained when the queue is shut down and idle.
func (q *Queue[K]) closeIfDrainedLocked() {
	if q.shuttingDown && !q.drainedClosed && q.core.idle() {
		q.drainedClosed = true
		close(q.drained)
	}
}

// AddAfter adds k once d has passed; d <= 0 adds it now. If k is already
// waiting for a later time, the earlier time wins. Each call counts a
// retry (workqueue_retries_total), d <= 0 too, as client-go's AddAfter
// does, unless the queue is shutting down (a call then adds and counts
// nothing, as in client-go, a drain's wait included). Delayed keys are
// dropped by ShutDown. AddAfter never blocks on the delay goroutine (its
// intake is unbounded); safe for concurrent use.
func (q *Queue[K]) AddAfter(k K, d time.Duration) {
	if d <= 0 {
		if q.ShuttingDown() {
			return
		}
		q.metrics.retried()
	}
	q.AddWithOpts(k, AddOpts{After: d})
}

// AddRateLimited adds k after the delay the rate limiter gives it now, and
// counts a retry. It does not block; safe for concurrent use.
func (q *Queue[K]) AddRateLimited(k K) {
	q.AddWithOpts(k, AddOpts{RateLimited: true})
}

// AddWithOpts adds k at a priority, after a delay or rate limited; see
// AddOpts. A key already waiting keeps the higher priority (moving to the
// back of its flow in the higher band) and the earlier time. An add with a
// delay or rate limited counts a retry (workqueue_retries_total: a
// reconcile's RequeueAfter, a failure's backoff), as controller-runtime's
// queues count them, unless the queue is shutting down: no add is taken
// then. It does not block; safe for concurrent use.
func (q *Queue[K]) AddWithOpts(k K, o AddOpts) {
	d := o.After
	if !o.RateLimited && d <= 0 {
		q.add(k, clampPriority(o.Priority))
		return
	}
	if q.ShuttingDown() {
		return
	}
	q.metrics.retried()
	now := q.clock.Now()
	if o.RateLimited {
		q.limitMu.Lock()
		d = max(d, q.limiter.When(k, now))
		q.limitMu.Unlock()
	}
	if d <= 0 {
		q.add(k, clampPriority(o.Priority))
		return
	}
	q.delay.after(k, clampPriority(o.Priority), now.Add(d))
}

// addBatchChunk is how many keys AddBatch adds per lock: their flows are
// named first, outside the lock, in a buffer of this size on the stack.
const addBatchChunk = 32

// AddBatch is AddWithPriority for each of keys, in order, taking the
// queue's lock once per 32 keys and waking only workers that wait
// (rather than locking and signalling once per key): what an informer calls with the keys of a batch of
// events (handler.BatchAdder). It does not block; safe for concurrent use.
func (q *Queue[K]) AddBatch(keys []K, priority int) {
	prio := clampPriority(priority)
	var flows [addBatchChunk]string
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), addBatchChunk)]
		keys = keys[len(chunk):]
		for n, k := range chunk {
			flows[n] = q.flowKey(k)
		}
		if !q.addChunk(chunk, flows[:len(chunk)], prio) {
			return
		}
	}
}

// Reserve makes room for n more keys than the queue holds, so that a
// burst of about that many new keys (an informer's first list, through
// handler.EnqueueKey) does not grow the queue's bookkeeping step by step:
// S1w's sync CPU on 100,000 ConfigMaps was 5% and 11% less on average over
// two sets of four alternated runs (docs/benchmarks.md). It is a hint: more
// or fewer keys may come, and the room counts as a peak of the queue's, so
// it is given back as a peak is (see core.reserve). A shut-down queue
// ignores it. Safe for concurrent use.
func (q *Queue[K]) Reserve(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.shuttingDown {
		q.core.reserve(n)
	}
}

// AddWithPriority is AddWithOpts(k, AddOpts{Priority: priority}). Its
// arguments are plain types, so packages that do not import workqueue can
// declare it in an interface (handler.PriorityAdder); safe for concurrent
// use.
func (q *Queue[K]) AddWithPriority(k K, priority int) { q.add(k, clampPriority(priority)) }

// BandState describes the keys waiting at one priority.
type BandState struct {
	Priority int
	// Depth is the number of keys waiting at Priority.
	Depth int
	// Oldest is when the oldest of them was queued, or zero if the queue
	// did not read the clock for it (it does only with metrics on or when
	// two bands wait at once).
	Oldest time.Time
}

// Bands returns the bands that hold keys, highest priority first: a
// snapshot the caller owns. Safe for concurrent use.
func (q *Queue[K]) Bands() []BandState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.bandStates()
}

// Forget makes the rate limiter forget k's failures and free what it held
// for k; call it when k was processed successfully. It does not remove k
// from the queue. Safe for concurrent use.
func (q *Queue[K]) Forget(k K) {
	q.limitMu.Lock()
	defer q.limitMu.Unlock()
	q.limiter.Forget(k)
}

// NumRequeues returns how many times k has been rate limited since it was
// last forgotten. Safe for concurrent use.
func (q *Queue[K]) NumRequeues(k K) int {
	q.limitMu.Lock()
	defer q.limitMu.Unlock()
	return q.limiter.NumRequeues(k)
}

// queueProgress is the view of a Queue that the scrape-time gauges read.
type queueProgress[K comparable] Queue[K]

func (p *queueProgress[K]) depth() int {
	q := (*Queue[K])(p)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.dirty()
}

func (p *queueProgress[K]) bands() ([]BandState, time.Time) {
	q := (*Queue[K])(p)
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.bandStates(), now
}

func (p *queueProgress[K]) inFlight() (total, longest float64) {
	q := (*Queue[K])(p)
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.core.stamps.procs {
		if !p.used {
			continue
		}
		s := now.Sub(p.started).Seconds()
		total += s
		longest = max(longest, s)
	}
	return total, longest
}
