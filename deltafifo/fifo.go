package deltafifo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ctrlkit/ctrlkit/internal/fifo"
	"github.com/ctrlkit/ctrlkit/internal/peak"
	"github.com/ctrlkit/ctrlkit/object"
)

// ErrClosed is returned by Pop once the FIFO is closed.
var ErrClosed = errors.New("deltafifo: closed")

// ErrInterrupted is returned by the Pop or PopBatch that finds the FIFO
// empty after Interrupt.
var ErrInterrupted = errors.New("deltafifo: interrupted")

// Item is what Pop hands out: exactly one of the deltas of one key, a relist
// or a bookmark. The caller owns it (an Item of PopBatch, until it hands
// the batch back).
type Item[T object.Object] struct {
	// Key and Deltas are set for the changes of one key, oldest first.
	Key    string
	Deltas []Delta[T]
	// Replace is set for a relist given whole (Replace): the cache must
	// become exactly Items, as of ResourceVersion.
	Replace *Snapshot[T]
	// Relist is set for one part of a relist given in parts (the
	// reflector.RelistSink methods).
	Relist *RelistPart[T]
	// Bookmark, when the other fields are empty, is a resource version the
	// consumer has now fully applied.
	Bookmark string
}

// Snapshot is the result of a list.
type Snapshot[T object.Object] struct {
	Items           []T
	ResourceVersion string
	// Seq numbers this end of a relist among every end handed to the FIFO
	// (see RelistPart.Seq).
	Seq uint64
	// Finals are the deleted objects of the watch deletes this relist
	// superseded (see RelistPart.Finals).
	Finals []T
}

// RelistPart is one part of a relist given in parts, popped in the order
// the reflector gave them. Begin starts a relist; Items are upserted in
// order; Deleted are removed; End ends it: the consumer's state must become
// exactly what the relist gave (objects it holds that were neither given
// nor rewritten since Begin are gone), as of ResourceVersion. A part may
// combine several of these, applied in that order. A Begin before an End
// supersedes the unfinished relist.
type RelistPart[T object.Object] struct {
	Begin           bool
	Items           []T
	Deleted         []T
	End             bool
	ResourceVersion string
	// Abandoned, with End, ends a relist that could not be given whole
	// (AbandonRelist): the consumer keeps what it holds and deletes nothing.
	Abandoned bool
	// Seq, with End, numbers this end among every end of a relist handed
	// to the FIFO (Replace, EndRelist, AbandonRelist), 1 for the first, in
	// the order they were handed, as the reflector counts them
	// (reflector.Ended). A superseded relist's number is never popped: the
	// consumer that applies number k has applied or superseded every
	// relist numbered k or less.
	Seq uint64
	// Finals, with Begin, are the deleted objects of the watch deletes the
	// relist superseded (those of a superseded relist that was never popped
	// first, then by key in queue order, a key's in server order).
	// A relist tells a cached object it lacks as deleted with its final
	// state unknown; the consumer can tell such an object's deletion with
	// the state the watch delivered instead, as client-go's handlers get
	// it. The FIFO does not know the consumer's cache: a final may be of an
	// object the consumer never held, or of an older life of its key.
	Finals []T
}

// MaxQueuedRelistParts bounds the relist parts waiting to be popped:
// RelistItems and RelistDelete block while that many wait, so a fast list
// never piles up beside the cache it will replace.
const MaxQueuedRelistParts = 2

// FIFO is the delta FIFO: a queue of keys, each with its compacted deltas,
// plus at most one pending relist that comes first. It implements
// reflector.Sink[T]. See the package documentation for its rules.
type FIFO[T object.Object] struct {
	// mu guards every field below. Invariants (checkInvariants): every key of
	// order is in deltas and vice versa, once; each key's deltas obey
	// checkDeltas.
	mu       sync.Mutex
	replace  *Snapshot[T]          // pending relist, popped before any key
	parts    []*RelistPart[T]      // pending parts of a relist, popped before any key; empty while replace is set
	order    fifo.Queue[string]    // queued keys in first-queued order
	deltas   map[string][]Delta[T] // the deltas of each queued key
	peak     peak.Tracker          // deltas' largest size since rebuilt
	bookmark string                // pending bookmark, popped when all else is
	spare    [][]Delta[T]          // emptied Deltas of applied Items (PopBatch), reused by push; at most maxSpare
	ends     uint64                // relist ends handed to the FIFO (Seq of the last)
	closed   bool
	// interrupted makes the next Pop that finds nothing ready return
	// ErrInterrupted (Interrupt).
	interrupted bool

	wake   chan struct{} // buffer 1: "an Item may be ready"
	space  chan struct{} // buffer 1: "a relist part was popped"
	closeC chan struct{} // closed by Close
}

// New returns an empty FIFO.
func New[T object.Object]() *FIFO[T] {
	return &FIFO[T]{deltas: map[string][]Delta[T]{}, wake: make(chan struct{}, 1), space: make(chan struct{}, 1),
		closeC: make(chan struct{})}
}

// Add queues an Added delta for obj. It fails only if obj has no valid key.
func (f *FIFO[T]) Add(obj T) error { return f.push(Delta[T]{Type: Added, Object: obj}) }

// Update queues an Updated delta for obj.
func (f *FIFO[T]) Update(obj T) error { return f.push(Delta[T]{Type: Updated, Object: obj}) }

// Delete queues a Deleted delta for obj, the deleted state.
func (f *FIFO[T]) Delete(obj T) error { return f.push(Delta[T]{Type: Deleted, Object: obj}) }

func (f *FIFO[T]) push(d Delta[T]) error {
	key, err := object.MetaNamespaceKeyFunc(d.Object)
	if err != nil {
		return fmt.Errorf("deltafifo: %v: %w", d.Type, err)
	}
	f.mu.Lock()
	ds, queued := f.deltas[key]
	if n := len(f.spare); !queued && n > 0 {
		ds = f.spare[n-1]
		f.spare[n-1] = nil
		f.spare = f.spare[:n-1]
	}
	f.deltas[key] = appendDelta(ds, d)
	if !queued {
		f.order.Push(key)
		f.peak.Grew(len(f.deltas))
	}
	f.mu.Unlock()
	f.signal()
	return nil
}

// Replace drops everything still queued and queues one relist of items as
// of resourceVersion. It never fails; it checks nothing, since the
// consumer's cache validates keys as it swaps.
func (f *FIFO[T]) Replace(items []T, resourceVersion string) error {
	f.mu.Lock()
	finals := f.supersedeLocked()
	f.ends++
	f.replace = &Snapshot[T]{Items: items, ResourceVersion: resourceVersion, Seq: f.ends, Finals: finals}
	f.mu.Unlock()
	f.signal()
	return nil
}

// supersedeLocked drops everything queued: a relist is starting. It
// returns the finals of the deletes dropped (RelistPart.Finals): those of
// a relist dropped before it was popped, then every deleted object queued
// (a key holds at most two), in queue order.
func (f *FIFO[T]) supersedeLocked() (finals []T) {
	switch {
	case f.replace != nil:
		finals = f.replace.Finals
	case len(f.parts) > 0 && f.parts[0].Begin:
		finals = f.parts[0].Finals
	}
	for _, key := range f.order.Items() {
		for _, d := range f.deltas[key] {
			if d.Type == Deleted {
				finals = append(finals, d.Object)
			}
		}
	}
	f.replace = nil
	clear(f.parts)
	f.parts = f.parts[:0]
	f.order = fifo.Queue[string]{}
	f.deltas = peak.Clear(&f.peak, f.deltas)
	f.bookmark = ""
	return finals
}

// BeginRelist drops everything still queued, as Replace does, and queues
// the start of a relist given in parts (reflector.RelistSink).
func (f *FIFO[T]) BeginRelist() error {
	f.mu.Lock()
	finals := f.supersedeLocked()
	f.parts = append(f.parts, &RelistPart[T]{Begin: true, Finals: finals})
	f.mu.Unlock()
	f.signal()
	return nil
}

// RelistItems queues listed objects of the current relist. It blocks while
// MaxQueuedRelistParts parts wait to be popped, and fails with ErrClosed
// once the FIFO is closed.
func (f *FIFO[T]) RelistItems(items []T) error {
	return f.queuePart(&RelistPart[T]{Items: items})
}

// RelistDelete queues the deletion of obj during the current relist. It
// blocks as RelistItems does.
func (f *FIFO[T]) RelistDelete(obj T) error {
	return f.queuePart(&RelistPart[T]{Deleted: []T{obj}})
}

// EndRelist queues the end of the current relist, as of resourceVersion. It
// never blocks.
func (f *FIFO[T]) EndRelist(resourceVersion string) error {
	f.end(resourceVersion, false)
	return nil
}

// AbandonRelist ends the relist in parts under way without its end: the
// consumer keeps what it applied and deletes nothing for it (e.g. an item
// of it could not be transformed). It counts as an end (RelistPart.Seq).
func (f *FIFO[T]) AbandonRelist() {
	f.end("", true)
}

func (f *FIFO[T]) end(resourceVersion string, abandoned bool) {
	f.mu.Lock()
	f.ends++
	if n := len(f.parts); n > 0 && !f.parts[n-1].End {
		p := f.parts[n-1]
		p.End, p.ResourceVersion, p.Abandoned, p.Seq = true, resourceVersion, abandoned, f.ends
	} else {
		f.parts = append(f.parts, &RelistPart[T]{End: true, ResourceVersion: resourceVersion, Abandoned: abandoned, Seq: f.ends})
	}
	f.mu.Unlock()
	f.signal()
}

func (f *FIFO[T]) queuePart(p *RelistPart[T]) error {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return ErrClosed
		}
		if len(f.parts) < MaxQueuedRelistParts {
			f.parts = append(f.parts, p)
			f.mu.Unlock()
			f.signal()
			return nil
		}
		f.mu.Unlock()
		select {
		case <-f.space:
		case <-f.closeC:
		}
	}
}

// Bookmark queues resourceVersion, popped once everything queued before it
// has been popped. A newer bookmark replaces a pending one.
func (f *FIFO[T]) Bookmark(resourceVersion string) {
	f.mu.Lock()
	f.bookmark = resourceVersion
	f.mu.Unlock()
	f.signal()
}

// Close makes every Pop, current and future, return ErrClosed. Items still
// queued are dropped. It is idempotent.
func (f *FIFO[T]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.closeC)
	}
}

// Len returns the number of Items ready to pop, bookmarks excluded.
func (f *FIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.order.Len() + len(f.parts)
	if f.replace != nil {
		n++
	}
	return n
}

// ListKeys returns the keys with deltas queued, in the order they will be
// popped (a pending relist, popped first, aside), as client-go's
// DeltaFIFO.ListKeys. The caller owns the slice.
func (f *FIFO[T]) ListKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.order.Items())
}

// GetByKey returns a copy of the deltas queued for key, oldest first, and
// whether any are, as client-go's DeltaFIFO.GetByKey. The objects are the
// queue's, to read only.
func (f *FIFO[T]) GetByKey(key string) ([]Delta[T], bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ds, ok := f.deltas[key]
	return slices.Clone(ds), ok
}

// Interrupt makes the Pop or PopBatch that next finds nothing ready (the
// one waiting now, if any) return ErrInterrupted instead of waiting: a
// consumer's way to act once it has applied everything queued (an informer
// writes a snapshot of its cache then). Items queued before it are still
// popped first; several Interrupts before that Pop count as one. Safe for
// concurrent use.
func (f *FIFO[T]) Interrupt() {
	f.mu.Lock()
	f.interrupted = true
	f.mu.Unlock()
	f.signal()
}

// Pop blocks until an Item is ready and returns it: the pending relist (or
// its parts, one at a time) first, then keys in the order they were first queued, then a pending
// bookmark. It returns ErrClosed after Close, or ctx's error when ctx ends.
// The caller processes the Item without any lock of the FIFO held.
func (f *FIFO[T]) Pop(ctx context.Context) (Item[T], error) {
	var one [1]Item[T] // nothing applied to hand back; no allocation
	items, err := f.PopBatch(ctx, one[:0], 1)
	if err != nil {
		return Item[T]{}, err
	}
	return items[0], nil
}

// maxSpare bounds the Deltas slices kept for reuse (see PopBatch).
const maxSpare = 1024

// PopBatch is Pop for a consumer that applies many keys in one go: it
// blocks as Pop does, then returns the Item Pop would return and, while
// the next Items are the deltas of keys, more, up to max in all (one at
// least, whatever max), in the order Pop would return them, under one lock. A relist (whole or a part)
// or a bookmark is always the only Item of its batch.
//
// applied is the previous batch, which the caller has applied and keeps
// no reference into (nil the first time): PopBatch clears it, keeps its
// Items' Deltas slices for later changes of keys not queued (a change then
// allocates nothing), and returns the new batch in applied's array. On an
// error it returns applied emptied.
func (f *FIFO[T]) PopBatch(ctx context.Context, applied []Item[T], max int) ([]Item[T], error) {
	into := applied[:0]
	for {
		f.mu.Lock()
		f.keepSpareLocked(applied)
		applied = nil
		if f.closed {
			f.mu.Unlock()
			return into, ErrClosed
		}
		it, ok := f.popLocked()
		if ok {
			into = append(into, it)
			for n := 1; it.Key != "" && n < max && f.order.Len() > 0; n++ {
				into = append(into, f.popKeyLocked())
			}
		}
		more := f.readyLocked()
		interrupted := !ok && f.interrupted
		if interrupted {
			f.interrupted = false
		}
		f.mu.Unlock()
		if interrupted {
			return into, ErrInterrupted
		}
		if it.Relist != nil {
			select {
			case f.space <- struct{}{}:
			default:
			}
		}
		if ok {
			if more {
				f.signal() // another Pop may proceed
			}
			return into, nil
		}
		select {
		case <-ctx.Done():
			return into, ctx.Err()
		case <-f.closeC:
		case <-f.wake:
		}
	}
}

func (f *FIFO[T]) popLocked() (Item[T], bool) {
	if r := f.replace; r != nil {
		f.replace = nil
		return Item[T]{Replace: r}, true
	}
	if len(f.parts) > 0 {
		p := f.parts[0]
		f.parts[0] = nil
		f.parts = f.parts[1:]
		if len(f.parts) == 0 {
			f.parts = nil
		}
		return Item[T]{Relist: p}, true
	}
	if f.order.Len() > 0 {
		return f.popKeyLocked(), true
	}
	if rv := f.bookmark; rv != "" {
		f.bookmark = ""
		return Item[T]{Bookmark: rv}, true
	}
	return Item[T]{}, false
}

// keepSpareLocked clears applied, keeping its Items' Deltas for reuse.
func (f *FIFO[T]) keepSpareLocked(applied []Item[T]) {
	for k := range applied {
		if ds := applied[k].Deltas; cap(ds) > 0 && len(f.spare) < maxSpare {
			clear(ds[:cap(ds)]) // a compaction may have left a delta past len
			f.spare = append(f.spare, ds[:0])
		}
	}
	clear(applied)
}

// popKeyLocked takes the first queued key and its deltas; one must be
// queued.
func (f *FIFO[T]) popKeyLocked() Item[T] {
	key := f.order.Pop()
	ds := f.deltas[key]
	delete(f.deltas, key)
	f.deltas = peak.Shrink(&f.peak, f.deltas)
	return Item[T]{Key: key, Deltas: ds}
}

func (f *FIFO[T]) readyLocked() bool {
	return f.replace != nil || len(f.parts) > 0 || f.order.Len() > 0 || f.bookmark != ""
}

func (f *FIFO[T]) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// checkInvariants returns an error describing a broken invariant, or nil.
// Tests and fuzzers call it.
func (f *FIFO[T]) checkInvariants() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	queued := f.order.Items()
	if len(queued) != len(f.deltas) {
		return fmt.Errorf("%d keys in order, %d with deltas", len(queued), len(f.deltas))
	}
	seen := make(map[string]bool, len(queued))
	for _, key := range queued {
		if seen[key] {
			return fmt.Errorf("key %q queued twice", key)
		}
		seen[key] = true
		ds, ok := f.deltas[key]
		if !ok {
			return fmt.Errorf("queued key %q has no deltas", key)
		}
		if err := checkDeltas(ds); err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
	}
	return f.checkSpareLocked()
}

// checkSpareLocked checks the kept Deltas: at most maxSpare, each empty
// and cleared, none sharing its array with another or with a queued key.
func (f *FIFO[T]) checkSpareLocked() error {
	if len(f.spare) > maxSpare {
		return fmt.Errorf("%d spare deltas kept, want at most %d", len(f.spare), maxSpare)
	}
	arrays := map[*Delta[T]]string{}
	for key, ds := range f.deltas {
		arrays[&ds[:1][0]] = "key " + key
	}
	for k, ds := range f.spare {
		if len(ds) != 0 || cap(ds) == 0 {
			return fmt.Errorf("spare deltas %d: len %d, cap %d; want empty with room", k, len(ds), cap(ds))
		}
		for _, d := range ds[:cap(ds)] {
			if d.Type != 0 || any(d.Object) != any(*new(T)) {
				return fmt.Errorf("spare deltas %d still hold a %v delta", k, d.Type)
			}
		}
		if owner, ok := arrays[&ds[:1][0]]; ok {
			return fmt.Errorf("spare deltas %d share their array with %s", k, owner)
		}
		arrays[&ds[:1][0]] = fmt.Sprintf("spare deltas %d", k)
	}
	return nil
}
