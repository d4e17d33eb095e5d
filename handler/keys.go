package handler

import (
	"sync"

	"github.com/ctrlkit/ctrlkit/object"
)

// EventType says which call of a Handler an Event stands for.
type EventType uint8

const (
	// AddEvent stands for OnAdd(Obj, Initial).
	AddEvent EventType = iota + 1
	// UpdateEvent stands for OnUpdate(Old, Obj).
	UpdateEvent
	// DeleteEvent stands for OnDelete(Deleted).
	DeleteEvent
)

// Event is one change an informer delivers: what one call of OnAdd,
// OnUpdate or OnDelete says, with the key the informer computed once.
// Its objects are shared with the cache: read them, never modify them.
type Event[T object.Object] struct {
	Type EventType
	// Key is the object's cache key ("namespace/name" or "name"); "" when
	// the event did not come from an informer (a Handler method called
	// directly), in which case KeyOf computes it.
	Key string
	// Obj is the new state (AddEvent, UpdateEvent).
	Obj T
	// Old is the state before (UpdateEvent); on a resync, the same object
	// as Obj.
	Old T
	// Initial reports an AddEvent of the initial list (isInInitialList).
	Initial bool
	// Resync reports an UpdateEvent that changes nothing: Obj is Old again
	// (a periodic resync) or at Old's resource version (a relist whose
	// versions the informer could not trust). Informers set it, so that
	// Background need not read Old, an object last touched long ago; for an
	// event built by hand (Key "") Background compares the versions itself.
	Resync bool
	// Deleted is the tombstone (DeleteEvent).
	Deleted object.Deleted[T]
}

// Background reports whether e is background work, which queues take at
// a low priority: an add of the initial list, or a resync (an update
// of an object to itself, or to the same known resource version).
func (e *Event[T]) Background() bool {
	switch e.Type {
	case AddEvent:
		return e.Initial
	case UpdateEvent:
		if e.Resync || any(e.Old) == any(e.Obj) {
			return true
		}
		if e.Key != "" { // an informer's: it said Resync
			return false
		}
		rv := e.Obj.GetResourceVersion()
		return rv != "" && rv == e.Old.GetResourceVersion()
	}
	return false
}

// KeyOf returns e's key: Key when set, else MetaNamespaceKeyFunc of the
// object (DeletionHandlingMetaNamespaceKeyFunc of a tombstone).
func (e *Event[T]) KeyOf() (string, error) {
	switch {
	case e.Key != "":
		return e.Key, nil
	case e.Type == DeleteEvent:
		return object.DeletionHandlingMetaNamespaceKeyFunc(e.Deleted)
	}
	return object.MetaNamespaceKeyFunc(e.Obj)
}

// Deliver makes the call of h that e stands for.
func (e *Event[T]) Deliver(h Handler[T]) {
	switch e.Type {
	case AddEvent:
		h.OnAdd(e.Obj, e.Initial)
	case UpdateEvent:
		h.OnUpdate(e.Old, e.Obj)
	case DeleteEvent:
		h.OnDelete(e.Deleted)
	}
}

// Filtered returns e as a handler sees it behind a filter that passes only
// the objects accept accepts, and false when that handler sees nothing:
// an update whose object leaves the filter is a delete of the old object
// (the last state the handler saw), one whose object enters it is an add
// of the new object, and a tombstone without an object passes (the
// filter cannot tell, and a delete of an unknown key is harmless where a
// missed delete is not). Filtering is this, as a Handler.
func (e Event[T]) Filtered(accept func(T) bool) (Event[T], bool) {
	switch e.Type {
	case AddEvent:
		return e, accept(e.Obj)
	case UpdateEvent:
		was, is := accept(e.Old), accept(e.Obj)
		switch {
		case was && is:
			return e, true
		case is:
			return Event[T]{Type: AddEvent, Key: e.Key, Obj: e.Obj}, true
		case was:
			return Event[T]{Type: DeleteEvent, Key: e.Key,
				Deleted: object.Deleted[T]{Name: object.NameOf(e.Old), Obj: e.Old, HasObj: true}}, true
		}
		return e, false
	case DeleteEvent:
		return e, !e.Deleted.HasObj || accept(e.Deleted.Obj)
	}
	return e, false
}

// Enqueuer is the one path from an informer into a queue: a Handler whose
// every event only adds keys to a queue that never blocks
// (NonBlockingAdder). An informer hands it the events of each batch it
// applies in one Enqueue call, in order, on the informer's own goroutine,
// while it holds its lock, instead of calling OnAdd, OnUpdate and OnDelete
// from a goroutine of the handler's: no hand-off, no goroutine wake-up, no
// allocation per event. Enqueue must not block nor call the informer or
// its Registration (that would deadlock); events is the informer's: read
// it during the call only. If Enqueue panics, the informer recovers,
// counts the panic and hands the batch over again one event at a time, so
// a panic loses only the event it was raised on; events added before the
// panic are then given again (a queue's add is idempotent: an Enqueuer
// that counts must allow for it).
//
// ExpectKeys(n) says about n keys are about to come (a hint: more or
// fewer may). The informer calls it before it applies a list into its
// empty store when it knows the list's size: from a snapshot's header (a
// warm start) and from a paginated LIST's remaining count, which the API
// server gives only without selectors (a watch-list stream gives none). It
// is called on the informer's reflector or snapshot goroutine, maybe while
// Enqueue runs: it must be safe for that, and must not block.
//
// EnqueueKey, EnqueueObject, EnqueueMapped, EnqueueOwner and Enqueue return
// an Enqueuer when their queue is a NonBlockingAdder (workqueue.Queue and
// controller.Controller are), as a manager's For, Owns and Watches sources
// are.
type Enqueuer[T object.Object] interface {
	Handler[T]
	Enqueue(events []Event[T])
	ExpectKeys(n int)
}

// KeyFunc appends to dst the keys of type K that e queues, and returns
// dst: Keys, Names, Owners and Mapped build them. It runs where its
// handler runs: for an Enqueuer, on the informer's goroutine while it
// holds its lock, so it must not block, nor call any informer's or
// Registration's methods (HasSynced included: an informer's lock is not
// re-entrant, and two informers' functions calling each other deadlock);
// reading caches through their Reader is fine.
type KeyFunc[T object.Object, K comparable] func(dst []K, e *Event[T]) []K

// Enqueue returns a Handler that adds to q the keys keys gives for every
// event: the path of every helper of this package. Background work (see
// Event.Background) is queued at workqueue.LowPriority when q is a
// PriorityAdder, and the keys of a batch through AddBatch when q is a
// BatchAdder. When q is a NonBlockingAdder the Handler is an Enqueuer; its
// ExpectKeys does nothing (the keys need not be one per object).
func Enqueue[T object.Object, K comparable](q Adder[K], keys KeyFunc[T, K]) Handler[T] {
	return enqueue(q, keys, false)
}

// enqueue returns Enqueue's handler; expect passes the informer's hint
// on to a queue that is a Reserver (each object being one key).
func enqueue[T object.Object, K comparable](q Adder[K], keys KeyFunc[T, K], expect bool) Handler[T] {
	e := &enqueuer[T, K]{q: newAdder(q), keys: keys, expect: expect}
	if _, ok := q.(NonBlockingAdder); ok {
		return e
	}
	return perEvent[T, K]{e}
}

// enqueuer is Enqueue's Enqueuer. mu guards buf and ev, scratch space
// kept from call to call (one informer calls it from one goroutine, but
// a handler may be added to several).
type enqueuer[T object.Object, K comparable] struct {
	q      adder[K]
	keys   KeyFunc[T, K]
	expect bool

	mu  sync.Mutex
	buf []K
	ev  Event[T]
}

// Enqueue adds the keys of events, in order, in runs of equal background.
func (e *enqueuer[T, K]) Enqueue(events []Event[T]) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys, bg := e.buf[:0], false
	for i := range events {
		ev := &events[i]
		b := ev.Background()
		if b != bg && len(keys) > 0 {
			e.q.addBatch(keys, bg)
			clear(keys)
			keys = keys[:0]
		}
		bg = b
		keys = e.keys(keys, ev)
	}
	if len(keys) > 0 {
		e.q.addBatch(keys, bg)
	}
	clear(keys) // hold no key of a deleted object
	e.buf = keys[:0]
}

// ExpectKeys makes room in the queue for n keys, if it is a Reserver and
// each object is one key.
func (e *enqueuer[T, K]) ExpectKeys(n int) {
	if r, ok := e.q.q.(Reserver); ok && e.expect {
		r.Reserve(n)
	}
}

func (e *enqueuer[T, K]) OnAdd(obj T, isInInitialList bool) {
	e.one(Event[T]{Type: AddEvent, Obj: obj, Initial: isInInitialList})
}

func (e *enqueuer[T, K]) OnUpdate(old, new T) {
	e.one(Event[T]{Type: UpdateEvent, Old: old, Obj: new})
}

func (e *enqueuer[T, K]) OnDelete(d object.Deleted[T]) {
	e.one(Event[T]{Type: DeleteEvent, Deleted: d})
}

// one adds the keys of ev, without allocating.
func (e *enqueuer[T, K]) one(ev Event[T]) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = ev
	keys := e.keys(e.buf[:0], &e.ev)
	bg := e.ev.Background()
	for _, k := range keys {
		e.q.add(k, bg)
	}
	clear(keys)
	e.buf, e.ev = keys[:0], Event[T]{}
}

// perEvent is Enqueue's Handler into a queue that may block: it has only
// the Handler's methods, so the informer calls it on a goroutine of its
// own, event by event.
type perEvent[T object.Object, K comparable] struct{ e *enqueuer[T, K] }

func (p perEvent[T, K]) OnAdd(obj T, isInInitialList bool) { p.e.OnAdd(obj, isInInitialList) }
func (p perEvent[T, K]) OnUpdate(old, new T)               { p.e.OnUpdate(old, new) }
func (p perEvent[T, K]) OnDelete(d object.Deleted[T])      { p.e.OnDelete(d) }
