package reflector

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Sink receives what the Reflector learns, in server order. The DeltaFIFO
// implements it. Methods are called from the Reflector's goroutine only; an
// error is logged and counted, and the Reflector goes on.
type Sink[T object.Object] interface {
	// Replace makes the sink's state exactly items, as of resourceVersion.
	Replace(items []T, resourceVersion string) error
	Add(obj T) error
	Update(obj T) error
	Delete(obj T) error
	// Bookmark says the sink is current up to resourceVersion.
	Bookmark(resourceVersion string)
}

// RelistSink is a Sink that takes a relist in parts, as its pages (or
// watch-list's initial events) arrive, so that the Reflector never holds a
// whole list and the sink can apply it without keeping the new state beside
// the old one. The DeltaFIFO implements it. A Reflector whose sink is not a
// RelistSink gathers each relist and calls Replace once.
//
// A relist is BeginRelist, then any number of RelistItems and RelistDelete,
// then EndRelist. A BeginRelist before EndRelist means the relist failed
// halfway and starts over: the parts given so far were true states of the
// objects, but the relist that counts is the new one.
type RelistSink[T object.Object] interface {
	Sink[T]
	// BeginRelist starts a relist.
	BeginRelist() error
	// RelistItems gives listed objects, in order; an object may replace
	// one given earlier in the same relist (watch-list's MODIFIED events).
	RelistItems(items []T) error
	// RelistDelete says obj, given earlier in this relist or held from
	// before, was deleted while the relist was being sent (watch-list's
	// DELETED events among the initial ones).
	RelistDelete(obj T) error
	// EndRelist ends the relist: the sink's state is exactly the objects
	// given since BeginRelist and not deleted, as of resourceVersion.
	EndRelist(resourceVersion string) error
}

// RelistSizer is an optional interface of a RelistSink: it is told, with
// the first page of a relist's list, how many objects the whole list holds
// when the ListerWatcher says so (List.RemainingItemCount: the server's
// ListMeta.RemainingItemCount, given for paginated lists without
// selectors; listwatch drops it when it filters a shard on the client),
// e.g. to size a cache once instead of growing it step by step. It is a
// hint, at most MaxRelistSizeHint: the list may turn out otherwise.
type RelistSizer interface {
	RelistSize(n int)
}

// MaxRelistSizeHint bounds what a RelistSizer is told, so that a wrong
// count from a server cannot make a sink reserve unbounded memory.
const MaxRelistSizeHint = 1 << 20

// Clock is the time source of the IO driver. The decisions take time as
// input and never read a clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configure a Reflector. The zero value means the defaults.
type Options struct {
	// Name identifies the reflector in logs and metrics. Default: the type T.
	Name string
	// PageSize is the number of objects per list page. When set, it also
	// applies to relists at a specific resource version, which are otherwise
	// sent whole so that the API server's watch cache can serve them.
	// Default: 500 (and whole relists at a specific resource version).
	PageSize int64
	// MinWatchTimeout is the shortest server-side timeout of a watch; each
	// watch draws its timeout between it and twice it, so many reflectors
	// do not reconnect at once. Less than 5m is raised to 5m: shorter
	// watches only make the server re-establish them more often.
	// Default: 5m.
	MinWatchTimeout time.Duration
	// DisableWatchList syncs with paginated lists only, never with a
	// watch-list stream. Default: stream where the server supports it.
	DisableWatchList bool
	// OnError is called with every list or watch error, a *Error, e.g. to
	// report 403 Forbidden or a missing resource. It must not block.
	// Default: none.
	OnError func(error)
	// Telemetry: the Logger receives one line per skipped object and
	// relist, and one per streak of identical list or watch failures (the
	// repeats are counted in ctrlkit_reflector_failures_total) and its
	// recovery; the Registerer the reflector's metrics.
	telemetry.Telemetry
	// Clock and Rand drive time and jitter; tests inject them. Default:
	// the real clock and math/rand/v2.
	Clock Clock
	Rand  func() float64
}

func (o Options) withDefaults(name string) Options {
	if o.Name == "" {
		o.Name = name
	}
	if o.PageSize == 0 {
		o.PageSize = 500
	}
	o.MinWatchTimeout = max(o.MinWatchTimeout, 5*time.Minute)
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	o.Logger = o.Log()
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

// Reflector lists and watches one resource and feeds what it sees to a
// Sink, forever, recovering from every failure the API server can produce
// (step 1 of the pipeline). See the package documentation for the rules.
type Reflector[T object.Object] struct {
	lw   ListerWatcher[T]
	sink Sink[T]
	// relistSink is sink when it takes relists in parts, else nil.
	relistSink RelistSink[T]
	opts       Options
	cfg        config
	metrics    *metrics
	// m and streaks are owned by the goroutine running Run or ListAndWatch
	// (one at a time); they outlive a call, so the next call relists at the
	// resource version the last one synced, never back at "0".
	m       *machine[T]
	streaks streaks
	// hold, set by ResumeWhileLoading before Run, delivers ready's error;
	// the goroutine running Run clears it once received.
	hold chan error

	// relistC carries Relist's requests to the goroutine running Run;
	// ended counts relists handed whole to the sink (EndRelist or Replace).
	relistC chan relistReq
	ended   atomic.Uint64

	mu     sync.Mutex // guards lastRV, err, stats and resume
	lastRV string
	err    error
	stats  Stats // ResourceVersion unused: lastRV is the one
	resume Resume
}

// Close unregisters the reflector's metrics, so that another reflector of
// the same name can register its own: for a reflector that will not run
// again (an informer stopped while its process goes on). Call it once Run
// has returned, or instead of Run.
func (r *Reflector[T]) Close() {
	if r.metrics != nil {
		r.metrics.series.Unregister()
	}
}

// New returns a Reflector; it starts nothing. It fails only if its metrics
// cannot be registered (for example, a second reflector with the same Name
// on the same Registerer).
func New[T object.Object](lw ListerWatcher[T], sink Sink[T], opts Options) (*Reflector[T], error) {
	var zero T
	explicitPageSize := opts.PageSize != 0
	opts = opts.withDefaults(fmt.Sprintf("%T", zero))
	m, err := newMetrics(opts.Telemetry, opts.Name)
	if err != nil {
		return nil, err
	}
	r := &Reflector[T]{
		lw: lw, sink: sink, opts: opts, metrics: m,
		cfg: config{
			pageSize: opts.PageSize, explicitPageSize: explicitPageSize,
			minTimeout: opts.MinWatchTimeout, maxTimeout: 2 * opts.MinWatchTimeout,
			shortWatch: time.Second, silence: 10 * time.Second, confirmTimeout: time.Second,
			disableWatchList: opts.DisableWatchList,
			backoffInitial:   800 * time.Millisecond, backoffMax: 30 * time.Second, backoffReset: 2 * time.Minute,
		},
	}
	r.relistC = make(chan relistReq)
	r.relistSink, _ = sink.(RelistSink[T])
	r.m = newMachine[T](r.cfg, opts.Rand)
	return r, nil
}

// LastSyncResourceVersion returns the resource version of the last list,
// event or bookmark handed to the sink, recorded just before the sink is
// called and read from the event as it arrived (a transform that edits the
// object does not change it); "" before the first sync. Safe for concurrent
// use.
func (r *Reflector[T]) LastSyncResourceVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRV
}

// LastError returns the last list or watch error, a *Error (read it with
// errors.As), or nil once a list or watch has succeeded since. Safe for
// concurrent use.
func (r *Reflector[T]) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Reflector[T]) setRV(rv string) {
	r.mu.Lock()
	r.lastRV = rv
	r.mu.Unlock()
	r.metrics.setRV(rv)
}

func (r *Reflector[T]) setErr(err error) {
	r.mu.Lock()
	r.err = err
	if err != nil {
		r.noteErrLocked(err)
	} else {
		r.stats.FailingSince = time.Time{} // a list succeeded or a watch opened
	}
	r.mu.Unlock()
	if err != nil {
		r.opts.OnError(err)
	}
}
