package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/store"
)

// Errors returned by the informer; classify them with errors.Is.
var (
	// ErrStarted reports a second call to Run.
	// It is the same value as the other packages' ErrStarted.
	ErrStarted = run.ErrStarted
	// ErrStopped reports adding a handler to an informer whose Run has
	// returned or is returning.
	ErrStopped = errors.New("informer: stopped")
)

// Options configure an informer. The zero value means the defaults.
type Options[T object.Object] struct {
	// Name identifies the informer in logs, metrics and errors. Default:
	// the type T, e.g. "*v1.ConfigMap".
	Name string
	// Indexers are added to the cache's namespace index. Default: none.
	Indexers store.Indexers[T]
	// Transform runs once on each object the reflector delivers, before the
	// object is queued and cached, e.g. to drop fields the controller does
	// not read. It runs on the reflector's goroutine. An error is logged;
	// it drops the add, update or whole relist, while a delete still goes
	// through with the untransformed object. A dropped relist is made
	// again after a backoff (1s, doubling to a minute while they fail), as
	// client-go lists again when its store's Replace fails: a transient
	// error on the first list delays the sync, and a transform that
	// always fails on an object lists again once a minute. Default: none.
	Transform func(T) (T, error)
	// Snapshot keeps the cache across restarts; see Snapshot. Default: off
	// (a Factory fills it from FactoryOptions.Snapshots).
	Snapshot Snapshot[T]
	// FactoryOptions are what every informer of a Factory shares: the
	// reflector's options, managed fields, interning and telemetry.
	FactoryOptions
}

// HandlerOptions configure one handler registration.
type HandlerOptions struct {
	// Name identifies the handler in logs and metrics; it must be unique
	// within the informer. Default: handler-N.
	Name string
	// ResyncPeriod, when positive, re-delivers every cached object to this
	// handler as OnUpdate(obj, obj) that often. It never relists, and has
	// no minimum: a period of milliseconds replays the whole cache that
	// often (client-go raises periods under a second to one second).
	// Default: 0.
	ResyncPeriod time.Duration
}

// SharedIndexInformer keeps an indexed cache of one resource in step with
// the API server and tells any number of handlers about every change, each
// from its own goroutine, or an inline key handler from the informer's
// (steps 1 to 6 of the pipeline). See the package documentation for its
// guarantees.
type SharedIndexInformer[T object.Object] struct {
	name      string
	log       *slog.Logger
	idx       *store.Indexer[T]
	fifo      *deltafifo.FIFO[T]
	refl      *reflector.Reflector[T]
	metrics   *metrics
	det       *detector[T] // nil: mutations are not checked
	atomic    bool         // Options.AtomicRelist
	handlerID atomic.Int64
	table     *intern.Table // nil: no interning; used by the reflector's sink calls and, before the first of them, the snapshot's loader
	snap      *snapshots[T] // nil: no snapshots
	// noSnapshot is why there are none, when a Factory turned them off
	// for this informer; CacheStart's reason.
	noSnapshot string

	// mu guards the fields below, and makes each cache write and the
	// notifications it causes one step for AddEventHandler and resyncs.
	// Invariant: synced implies syncedC is closed.
	mu        sync.Mutex
	listeners []*listener[T]
	once      run.Once // Run
	stopped   bool
	synced    bool
	syncedC   chan struct{}
	// relists is the number (deltafifo.RelistPart.Seq, the reflector's
	// count of ended relists) of the last relist end applied to the cache,
	// whole or abandoned; a relist superseded in the FIFO is counted by its
	// successor. relisted is closed and replaced at each (see Relist).
	relists  uint64
	relisted chan struct{}
	held     *heldRelist[T] // AtomicRelist: the relist being received
	// relisting: a streamed relist has begun and not ended (the cache
	// mixes two states); distrust: its objects are notified as changed
	// whatever their versions (a snapshot newer than the server).
	relisting, distrust bool
	// finals are the final states of watch deletes a relist superseded
	// (deltafifo.RelistPart.Finals) whose object the cache holds, by key:
	// the relist's end tells such an object's deletion with it rather than
	// as FinalStateUnknown. Kept until a relist ends applied.
	finals   map[string]T
	stopping chan struct{} // closed when Run's context ends
	retrying bool          // listAgain waits to list again
	// removedPanics are the panics of removed handlers by name, which
	// their name's panics_total goes on counting.
	removedPanics map[string]uint64
	wg            sync.WaitGroup
}

// New returns an informer over lw; it starts nothing. It fails on invalid
// Indexers or when its metrics cannot be registered (a second informer with
// the same Name on the same Registerer).
func New[T object.Object](lw reflector.ListerWatcher[T], opts Options[T]) (*SharedIndexInformer[T], error) {
	var zero T
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%T", zero)
	}
	opts.Logger = opts.Log()
	idx, err := store.New(store.Options[T]{Indexers: opts.Indexers})
	if err != nil {
		return nil, fmt.Errorf("informer %s: %w", opts.Name, err)
	}
	i := &SharedIndexInformer[T]{
		name: opts.Name, log: opts.Logger, idx: idx, fifo: deltafifo.New[T](), atomic: opts.AtomicRelist,
		syncedC: make(chan struct{}), stopping: make(chan struct{}), relisted: make(chan struct{}),
	}
	if i.det, err = newDetector(opts); err != nil {
		return nil, fmt.Errorf("informer %s: %w", opts.Name, err)
	}
	if i.snap, err = newSnapshots(opts.Snapshot); err != nil {
		return nil, fmt.Errorf("informer %s: %w", opts.Name, err)
	}
	if i.snap != nil {
		i.snap.interrupt = i.fifo.Interrupt
	}
	if !opts.DisableInterning {
		i.table = intern.NewTable(0)
		if opts.ShareMaps {
			i.table.ShareMaps()
		}
		i.snap.internWhileDecoding(opts.ShareMaps)
	}
	body := false // the ListerWatcher interns the metadata as it decodes
	if mi, ok := lw.(metadataInterner); ok && i.table != nil && !opts.ShareMaps && opts.Transform == nil {
		body = mi.InternMetadata()
	}
	sink := &transformSink[T]{next: i.fifo, fn: transformFor(opts, i.table, body), size: i.reserve, abandoned: i.listAgain}
	i.refl, err = reflector.New(lw, reflector.Sink[T](sink), reflectorOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("informer %s: %w", opts.Name, err)
	}
	if i.metrics, err = newMetrics(opts.Telemetry, i); err != nil {
		i.refl.Close()
		return nil, fmt.Errorf("informer %s: %w", opts.Name, err)
	}
	return i, nil
}

// reflectorOptions are opts.Reflector with the informer's name, logger and
// registerer where it has none.
func reflectorOptions[T object.Object](opts Options[T]) reflector.Options {
	ro := opts.Reflector
	if ro.Name == "" {
		ro.Name = opts.Name
	}
	ro.Telemetry = ro.Telemetry.Or(opts.Telemetry)
	return ro
}

// metadataInterner is a ListerWatcher that can intern the metadata of the
// objects it decodes as it decodes them (listwatch.KindListerWatcher).
type metadataInterner interface{ InternMetadata() bool }

// transformFor returns the transform New's options ask for: managedFields
// stripped (but for the entries of KeepManagedFieldsOf), then the user's
// transform, then interning with table (nil: none), of all but the
// metadata when body is set (the ListerWatcher interned it); nil when there
// is nothing to do.
func transformFor[T object.Object](opts Options[T], table *intern.Table, body bool) func(T) (T, error) {
	user, strip := opts.Transform, !opts.KeepManagedFields
	keep := intern.ManagedFields{Of: opts.KeepManagedFieldsOf, Added: opts.KeepManagedFieldsOfAdded}
	if user == nil && !strip && table == nil {
		return nil
	}
	return func(obj T) (T, error) {
		if strip {
			if a, err := meta.Accessor(any(obj)); err == nil {
				a.SetManagedFields(managedFieldsOf(a.GetManagedFields(), keep.Now()))
			}
		}
		if user != nil {
			var err error
			if obj, err = user(obj); err != nil {
				return obj, err
			}
		}
		switch {
		case table != nil && body:
			table.Body(any(obj))
		case table != nil:
			table.Object(any(obj))
		}
		return obj, nil
	}
}

// managedFieldsOf returns the entries of fields written by the managers
// keep keeps, in place, or nil when there are none.
func managedFieldsOf(fields []metav1.ManagedFieldsEntry, keep intern.ManagedFields) []metav1.ManagedFieldsEntry {
	if keep.None() || len(fields) == 0 {
		return nil // the default: strip them all, with no work per object
	}
	fields = slices.DeleteFunc(fields, func(e metav1.ManagedFieldsEntry) bool { return !keep.KeepsManager(e.Manager) })
	if len(fields) == 0 {
		return nil
	}
	return fields
}

// Close unregisters the informer's metrics and its reflector's, so that
// another informer of the same name can register its own: for an informer
// that will not run again while its process goes on (one a Factory
// removed). Call it once Run has returned, or instead of Run.
func (i *SharedIndexInformer[T]) Close() {
	i.refl.Close()
	if m := i.metrics; m != nil && m.tel.Registerer != nil {
		m.tel.Registerer.Unregister(m)
	}
}

// Run lists and watches, keeps the cache and notifies handlers until ctx
// ends, then returns nil once every goroutine it started (reflector, queue
// consumer, one per handler) has exited and, when mutations are detected,
// every cached object was compared with its copy a last time. With
// snapshots (Options.Snapshot), it starts from the snapshot file when that
// matches, and writes the cache to it before returning. A second call
// returns ErrStarted.
func (i *SharedIndexInformer[T]) Run(ctx context.Context) error {
	i.mu.Lock()
	if err := i.once.Start("informer " + i.name); err != nil {
		i.mu.Unlock()
		return err
	}
	for _, l := range i.listeners {
		i.wg.Go(func() { l.run(i.stopping) })
	}
	i.mu.Unlock()

	reflDone := make(chan struct{})
	looped := make(chan struct{})
	i.wg.Go(func() {
		defer close(looped)
		i.processLoop(ctx, reflDone)
	})
	if i.snap != nil {
		// The snapshot loads on its own goroutine; the reflector starts as
		// soon as its header is verified (or the start is known to be
		// cold), so that the server confirms the snapshot's version while
		// its objects decode.
		resume := make(chan struct{})
		i.wg.Go(func() { i.loadSnapshot(ctx, resume) })
		<-resume
		i.wg.Go(func() { i.snap.ticker(ctx) })
	}
	i.wg.Go(func() {
		defer close(reflDone)
		if err := i.refl.Run(ctx); err != nil {
			i.log.Error("informer: reflector stopped", "informer", i.name, "err", err)
		}
	})
	<-ctx.Done()
	if i.snap != nil {
		<-looped // it applies what the reflector handed over, then takes a last view
	}
	i.fifo.Close()
	i.mu.Lock()
	i.stopped = true
	close(i.stopping)
	i.mu.Unlock()
	i.wg.Wait()
	i.det.sweep() // a last look, e.g. at the end of a test
	return nil
}

// AddEventHandler registers h. h first receives every cached object as
// OnAdd(obj, true), then, if the informer has not synced, the rest of the
// initial list as it arrives (the pages already cached included: a handler
// added halfway through a paged first list misses none of it). It may be
// called before or during Run; after Run returned it fails with
// ErrStopped.
func (i *SharedIndexInformer[T]) AddEventHandler(h handler.Handler[T], opts HandlerOptions) (*Registration, error) {
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("handler-%d", i.handlerID.Add(1))
	}
	l := newListener(i, opts.Name, h, opts.ResyncPeriod)
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("informer %s: add handler %s: %w", i.name, opts.Name, ErrStopped)
	}
	defer func() { // after l joins the listeners
		i.flushHeldLocked()
		l.noteSynced()
	}()
	now := time.Now()
	for _, obj := range i.idx.List() {
		l.enqueue(object.NameOf(obj).String(), notification[T]{Type: handler.AddEvent, Obj: obj, Initial: true}, now)
	}
	l.armed = i.synced // else armed with the others once the initial list is in
	i.listeners = append(i.listeners, l)
	if i.once.Started() {
		i.wg.Go(func() { l.run(i.stopping) })
	}
	return &Registration{synced: func() bool { return i.HasSynced() && l.hasSynced() }, syncedC: l.syncedC, remove: l.remove}, nil
}

func (i *SharedIndexInformer[T]) removeListener(l *listener[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for k, x := range i.listeners {
		if x == l {
			i.listeners = slices.Delete(i.listeners, k, k+1) // clears the freed slot: the handler must not stay reachable
			close(l.stop)
			if n := l.panics.Load(); n > 0 { // the name's panics_total counts on, not down
				if i.removedPanics == nil {
					i.removedPanics = map[string]uint64{}
				}
				i.removedPanics[l.name] += n
			}
			return
		}
	}
}

// resyncListener queues every cached object for l as OnUpdate(obj, obj).
func (i *SharedIndexInformer[T]) resyncListener(l *listener[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !slices.Contains(i.listeners, l) { // removed since the tick
		return
	}
	defer i.flushHeldLocked()
	now := time.Now()
	for _, obj := range i.idx.List() {
		l.enqueue(object.NameOf(obj).String(), notification[T]{Type: handler.UpdateEvent, Old: obj, Obj: obj, Resync: true}, now)
	}
}

// IsStopped reports that Run's context has ended (the informer is stopping
// or stopped): AddEventHandler fails from then on with ErrStopped, as
// client-go's IsStopped tells. Safe for concurrent use.
func (i *SharedIndexInformer[T]) IsStopped() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.stopped
}

// HasSynced reports that the first list has been applied to the cache and
// handed to every handler (not that handlers have processed it: see
// Registration.HasSynced). Safe for concurrent use.
func (i *SharedIndexInformer[T]) HasSynced() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.synced
}

// Synced returns a channel closed once HasSynced reports true: a wait for
// it needs no polling, as client-go's HasSyncedChecker. Safe for
// concurrent use.
func (i *SharedIndexInformer[T]) Synced() <-chan struct{} { return i.syncedC }

// Relist makes the running informer list its resource again from scratch
// and returns once the cache reflects that list: objects the list no longer
// gives are deleted (handlers get OnDelete), new ones added, changed ones
// updated; unchanged ones notify nobody. Call it after changing what the
// ListerWatcher selects (e.g. the shard ranges a replica owns). A sync under
// way finishes first. It fails only when ctx ends first, or the informer
// stopped.
func (i *SharedIndexInformer[T]) Relist(ctx context.Context, cause error) error {
	rctx, cancel := i.untilStopping(ctx)
	defer cancel()
	n, err := i.refl.Relist(rctx, cause)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("informer %s: relist: %w", i.name, ErrStopped)
	}
	if err != nil {
		return err
	}
	for {
		i.mu.Lock()
		done, wait, stopped := i.relists >= n, i.relisted, i.stopped
		i.mu.Unlock()
		switch {
		case done:
			return nil
		case stopped:
			return fmt.Errorf("informer %s: relist: %w", i.name, ErrStopped)
		}
		select {
		case <-wait:
		case <-i.stopping:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// listAgain makes the reflector list again after a backoff, once a relist
// was dropped for a transform error (inARow of them in a row): 1s, doubling,
// at most a minute. Called on the reflector's goroutine, which must not
// wait for its own Relist: the request is made from a goroutine of Run's.
func (i *SharedIndexInformer[T]) listAgain(cause error, inARow int) {
	d := min(time.Second<<min(inARow-1, 6), time.Minute)
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped || i.retrying {
		return
	}
	i.retrying = true
	i.log.Warn("informer: a relist was dropped for a transform error; listing again", "informer", i.name, "after", d,
		"err", cause)
	i.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-i.stopping:
			return
		}
		// Before the relist is asked for: it may end, and fail, before
		// Relist returns, and must then be able to ask for the next.
		i.mu.Lock()
		i.retrying = false
		i.mu.Unlock()
		ctx, cancel := i.untilStopping(context.Background())
		defer cancel()
		_, _ = i.refl.Relist(ctx, fmt.Errorf("informer %s: the last relist was dropped: %w", i.name, cause))
	})
}

// untilStopping returns ctx, ended also when Run's context ends; call
// cancel once done with it.
func (i *SharedIndexInformer[T]) untilStopping(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-i.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// AddIndexers adds index functions to the cache, before or during Run.
func (i *SharedIndexInformer[T]) AddIndexers(indexers store.Indexers[T]) error {
	return i.idx.AddIndexers(indexers)
}

// LastSyncResourceVersion returns the resource version of the last list,
// event or bookmark the reflector received; "" before the first.
func (i *SharedIndexInformer[T]) LastSyncResourceVersion() string {
	return i.refl.LastSyncResourceVersion()
}

// LastError returns the reflector's last list or watch error, or nil once a
// list or watch succeeded since.
func (i *SharedIndexInformer[T]) LastError() error { return i.refl.LastError() }

// Name returns the informer's name.
func (i *SharedIndexInformer[T]) Name() string { return i.name }

// NewIndexerInformer is the seed documents' one-call setup: an informer over
// lw with h as its only handler, and a read-only view of the cache (the
// indexer) it keeps; Run the informer to fill it.
func NewIndexerInformer[T object.Object](lw reflector.ListerWatcher[T], h handler.Handler[T], opts Options[T]) (store.Reader[T], *SharedIndexInformer[T], error) {
	inf, err := New(lw, opts)
	if err != nil {
		return store.Reader[T]{}, nil, err
	}
	if _, err := inf.AddEventHandler(h, HandlerOptions{}); err != nil {
		return store.Reader[T]{}, nil, err
	}
	return inf.Reader(), inf, nil
}

// Reader returns the read-only view of the cache that reconcilers are
// given (store.NewLister makes a Lister of it). The informer owns the cache
// and is its only writer; nothing else gets the writable Indexer.
func (i *SharedIndexInformer[T]) Reader() store.Reader[T] { return store.NewReader(i.idx) }
