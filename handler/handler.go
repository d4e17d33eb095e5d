package handler

import (
	"io"
	"log/slog"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Handler receives the changes an informer sees, after its cache has been
// updated. Objects are shared with the cache: read them, never modify them.
type Handler[T object.Object] interface {
	// OnAdd is called for an object the handler has not seen: a new object,
	// or one of the cached objects the handler is first given, in which case
	// isInInitialList is true.
	OnAdd(obj T, isInInitialList bool)
	// OnUpdate is called when an object changed from old to new; on a resync
	// old and new are the same object.
	OnUpdate(old, new T)
	// OnDelete is called when an object is gone. d.Obj is its last known
	// state; d.FinalStateUnknown says the deletion was inferred by a relist.
	OnDelete(d object.Deleted[T])
}

// Funcs adapts functions to a Handler. A nil function ignores its events.
type Funcs[T object.Object] struct {
	AddFunc    func(obj T, isInInitialList bool)
	UpdateFunc func(old, new T)
	DeleteFunc func(d object.Deleted[T])
}

// OnAdd calls AddFunc if it is set.
func (f Funcs[T]) OnAdd(obj T, isInInitialList bool) {
	if f.AddFunc != nil {
		f.AddFunc(obj, isInInitialList)
	}
}

// OnUpdate calls UpdateFunc if it is set.
func (f Funcs[T]) OnUpdate(old, new T) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(old, new)
	}
}

// OnDelete calls DeleteFunc if it is set.
func (f Funcs[T]) OnDelete(d object.Deleted[T]) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(d)
	}
}

// KeyHandler is implemented by handlers that need only the key of each
// changed object ("namespace/name" or "name"), such as EnqueueKey's. An
// informer, which has computed the key already, calls OnKey instead of
// OnAdd, OnUpdate and OnDelete: once for all the changes of a key it
// delivers together, with nothing allocated. background is true when
// every one of those changes is background work: an object of the initial
// list (OnAdd with isInInitialList) or a resync (OnUpdate of an object to
// itself).
type KeyHandler interface {
	OnKey(key string, background bool)
}

// InlineKeyHandler is a KeyHandler whose OnKey only adds to a queue that
// never waits: when Inline reports true, an informer calls OnKey on its own
// goroutine, in order, as it applies each batch of changes (at the batch's
// end), instead of handing the key to a goroutine of the handler's (one
// hand-off, two allocations and a goroutine wake-up less per event). OnKey
// then runs while the informer holds its lock: it must not block, nor call the informer or its
// Registration (that would deadlock). A panic in OnKey is recovered and
// counted as any handler's. EnqueueKey's handler is one when its queue is a
// NonBlockingAdder.
type InlineKeyHandler interface {
	KeyHandler
	Inline() bool
}

// BatchKeyHandler is an InlineKeyHandler that also takes the keys of many
// changes at once: an informer applying a batch of events calls OnKeys
// with the keys it would have given OnKey one by one, in the same order,
// in runs of equal background (see KeyHandler). keys is the informer's:
// read it during the call only. If OnKeys panics, the informer recovers
// and calls OnKey for each of keys, so an idempotent handler (a queue)
// loses none of them. EnqueueKey's handler is one.
type BatchKeyHandler interface {
	InlineKeyHandler
	OnKeys(keys []string, background bool)
}

// KeyExpecter is a Handler that can be told how many keys are about to
// come: an informer calls ExpectKeys(n) before applying a list into its
// empty store when it knows the list's size (a hint: more or fewer may
// come). It knows it from a snapshot's header (a warm start) and from a
// paginated LIST's remaining count, which the API server gives only
// without selectors; a watch-list stream (the reflector's default where
// the server has it) gives none. EnqueueKey's handler is one, and passes
// the hint on to a queue that is a Reserver; so is the manager's handler of
// a controller's primary objects when no filter drops any. ExpectKeys is
// called on the informer's reflector or snapshot goroutine, maybe while
// the handler's other methods run on its own: it must be safe for that,
// and must not block.
type KeyExpecter interface {
	ExpectKeys(n int)
}

// Reserver is an Adder that can make room for about n new keys at once,
// instead of growing as they come: workqueue.Queue and
// controller.Controller. Reserve must not block either.
type Reserver interface {
	Reserve(n int)
}

// BatchAdder is an Adder that also adds many keys, in order, at one
// priority, under one lock: workqueue.Queue and controller.Controller.
// keys is the caller's: read it during the call only. For a
// NonBlockingAdder, AddBatch must not block either: an informer calls it
// with its lock held.
type BatchAdder[K comparable] interface {
	AddBatch(keys []K, priority int)
}

// NonBlockingAdder is an Adder whose Add (and AddWithPriority and AddBatch,
// if it has them) never waits on anything but a short lock of its own, nor
// calls back into an informer: workqueue.Queue and controller.Controller.
// (Their adds run the queue's FlowKey, which must not either.)
type NonBlockingAdder interface {
	NeverBlocks()
}

// Adder is where EnqueueKey puts keys: a workqueue.Queue[K] satisfies it.
type Adder[K comparable] interface {
	// Add queues k. It must not block for long: it runs on the handler's
	// goroutine, or on the informer's for a NonBlockingAdder.
	Add(k K)
}

// PriorityAdder is an Adder that also takes a priority: a
// workqueue.Queue[K] and a controller.Controller[K] satisfy it. Higher
// priorities are handed out first; see workqueue.AddOpts.Priority.
type PriorityAdder[K comparable] interface {
	Adder[K]
	// AddWithPriority queues k at priority. It must not block for long.
	AddWithPriority(k K, priority int)
}

// adder adds keys to q, at workqueue.LowPriority for background work when q
// takes priorities: the objects of the initial list (OnAdd with
// isInInitialList) and resyncs (OnUpdate with old and new at the same
// resource version). So at start-up, or when a handler is added late, a
// user's fresh change is not queued behind every cached object.
type adder[K comparable] struct {
	q  Adder[K]
	pq PriorityAdder[K] // q, if it takes priorities; else nil
	bq BatchAdder[K]    // q, if it takes batches; else nil
}

func newAdder[K comparable](q Adder[K]) adder[K] {
	pq, _ := q.(PriorityAdder[K])
	bq, _ := q.(BatchAdder[K])
	return adder[K]{q: q, pq: pq, bq: bq}
}

// addBatch queues keys, in order, as add would each.
func (a adder[K]) addBatch(keys []K, background bool) {
	if a.bq == nil {
		for _, k := range keys {
			a.add(k, background)
		}
		return
	}
	prio := 0
	if background && a.pq != nil {
		prio = workqueue.LowPriority
	}
	a.bq.AddBatch(keys, prio)
}

// add queues k; background says it comes from the initial list or a resync.
func (a adder[K]) add(k K, background bool) {
	if background && a.pq != nil {
		a.pq.AddWithPriority(k, workqueue.LowPriority)
		return
	}
	a.q.Add(k)
}

// isResync reports whether an update is a resync: the same, known, resource
// version on both sides.
func isResync[T object.Object](old, new T) bool {
	rv := new.GetResourceVersion()
	return rv != "" && rv == old.GetResourceVersion()
}

// EnqueueKey returns a Handler that adds the key of every changed object,
// "namespace/name" (or "name"), to q: the usual first half of a controller.
// If q is a PriorityAdder, the initial list and resyncs are queued at
// workqueue.LowPriority.
// A tombstone is keyed by object.DeletionHandlingMetaNamespaceKeyFunc. An
// object without a valid key is logged to logger (nil: discard) and
// ignored; the reflector never delivers one, so this is a safety net.
func EnqueueKey[T object.Object](q Adder[string], logger *slog.Logger) Handler[T] {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &enqueueKey[T]{q: newAdder(q), log: logger}
}

type enqueueKey[T object.Object] struct {
	q   adder[string]
	log *slog.Logger
}

// OnKey adds key: the informer's way in, the key computed once; background
// work goes in at workqueue.LowPriority as in OnAdd and OnUpdate.
func (e *enqueueKey[T]) OnKey(key string, background bool) { e.q.add(key, background) }

// OnKeys adds keys in order, in one batch when the queue takes batches
// (handler.BatchAdder).
func (e *enqueueKey[T]) OnKeys(keys []string, background bool) { e.q.addBatch(keys, background) }

// ExpectKeys makes room in the queue for n keys, if it is a Reserver.
func (e *enqueueKey[T]) ExpectKeys(n int) {
	if r, ok := e.q.q.(Reserver); ok {
		r.Reserve(n)
	}
}

// Inline reports whether the queue never blocks, so the informer may call
// OnKey on its own goroutine.
func (e *enqueueKey[T]) Inline() bool {
	_, ok := e.q.q.(NonBlockingAdder)
	return ok
}

func (e *enqueueKey[T]) OnAdd(obj T, isInInitialList bool) {
	key, err := object.MetaNamespaceKeyFunc(obj)
	e.add(key, err, isInInitialList)
}

func (e *enqueueKey[T]) OnUpdate(old, new T) {
	key, err := object.MetaNamespaceKeyFunc(new)
	e.add(key, err, isResync(old, new))
}

func (e *enqueueKey[T]) OnDelete(d object.Deleted[T]) {
	key, err := object.DeletionHandlingMetaNamespaceKeyFunc(d)
	e.add(key, err, false)
}

func (e *enqueueKey[T]) add(key string, err error, background bool) {
	if err != nil {
		e.log.Error("handler: cannot enqueue an object without a valid key", "err", err)
		return
	}
	e.q.add(key, background)
}
