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

// EnqueueKey returns a Handler that adds the key of every changed object,
// "namespace/name" (or "name"), to q: the usual first half of a controller.
// If q is a PriorityAdder, the initial list and resyncs are queued at
// workqueue.LowPriority. Into a NonBlockingAdder it is an Enqueuer, which
// passes the informer's hint of a list's size to q when q is a Reserver.
// A tombstone is keyed by object.DeletionHandlingMetaNamespaceKeyFunc. An
// object without a valid key is logged to logger (nil: discard) and
// ignored; the reflector never delivers one, so this is a safety net.
func EnqueueKey[T object.Object](q Adder[string], logger *slog.Logger) Handler[T] {
	return enqueue(q, Keys[T](logger), true)
}

// Keys is EnqueueKey's KeyFunc: each event's key. An event without a
// valid key is logged to logger (nil: discard) and queues nothing.
func Keys[T object.Object](logger *slog.Logger) KeyFunc[T, string] {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return func(dst []string, e *Event[T]) []string {
		key, err := e.KeyOf()
		if err != nil {
			logger.Error("handler: cannot enqueue an object without a valid key", "err", err)
			return dst
		}
		return append(dst, key)
	}
}
