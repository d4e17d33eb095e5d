package informer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
)

// popBatch is how many keys the processing loop takes from the FIFO at once
// and applies under one lock: the FIFO, the informer's lock and the clock
// are then paid once per batch instead of once per event, and the loop
// sleeps only when the FIFO is empty.
const popBatch = 64

// processLoop pops the FIFO until it is closed or ctx ends, applying each
// batch of Items to the cache and queuing the notifications it causes. It
// is the cache's only writer. With snapshots, it takes a view of the cache
// whenever the FIFO says it was interrupted (the ticker's Interrupt: the
// FIFO is then empty, so the cache holds every event received), and when
// ctx ends it goes on applying what the reflector hands over until the
// reflector has stopped (reflDone), then writes the last snapshot.
func (i *SharedIndexInformer[T]) processLoop(ctx context.Context, reflDone <-chan struct{}) {
	var batch []deltafifo.Item[T]
	for {
		var err error
		batch, err = i.fifo.PopBatch(ctx, batch, popBatch)
		switch {
		case err == nil:
			i.process(batch)
		case errors.Is(err, deltafifo.ErrInterrupted): // a snapshot is due
			if v, ok := i.takeView(); ok {
				i.snap.wg.Go(func() { i.write(v) })
			}
		case i.snap == nil || errors.Is(err, deltafifo.ErrClosed):
			return
		default:
			i.drain(reflDone)
			i.snap.wg.Wait()
			if v, ok := i.takeView(); ok {
				i.write(v)
			}
			return
		}
	}
}

// drain applies what the FIFO holds until the reflector has stopped and
// nothing is left.
func (i *SharedIndexInformer[T]) drain(reflDone <-chan struct{}) {
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-reflDone:
			cancel()
		case <-dctx.Done():
		}
	}()
	var batch []deltafifo.Item[T]
	for {
		var err error
		batch, err = i.fifo.PopBatch(dctx, batch, popBatch)
		switch {
		case errors.Is(err, deltafifo.ErrInterrupted): // a snapshot due: the last one is written after
		case err != nil:
			return
		default:
			i.process(batch)
		}
	}
}

// process applies one batch of the FIFO: a relist (whole or a part) or a
// bookmark, which PopBatch hands out alone, or the deltas of up to
// popBatch keys. It keeps no reference into the batch, which the next
// PopBatch reuses.
func (i *SharedIndexInformer[T]) process(batch []deltafifo.Item[T]) {
	switch it := batch[0]; {
	case it.Replace != nil: // a relist given whole: one part that is all of it
		i.relistPart(&deltafifo.RelistPart[T]{Begin: true, Items: it.Replace.Items, End: true,
			ResourceVersion: it.Replace.ResourceVersion, Seq: it.Replace.Seq, Finals: it.Replace.Finals})
	case it.Relist != nil:
		i.relistPart(it.Relist)
	case it.Key != "":
		i.applyKeys(batch)
	default:
		i.idx.Bookmark(it.Bookmark)
	}
	i.det.flush()
}

// dispatchLocked queues n for key with every handler.
func (i *SharedIndexInformer[T]) dispatchLocked(key string, n notification[T], now time.Time) {
	for _, l := range i.listeners {
		l.enqueue(key, n, now)
	}
}

// applyKeys writes the deltas of a batch of keys to the cache under one
// lock and notifies: an upsert is an add for a key the cache did not hold
// and an update from the cached object otherwise (so a compacted burst
// reads old -> newest); a delete of a cached key carries the deleted
// object, and a delete of a key the cache never held notifies nobody. Each
// key was computed once, by the FIFO.
func (i *SharedIndexInformer[T]) applyKeys(batch []deltafifo.Item[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	defer i.flushHeldLocked()
	now := time.Now()
	for _, it := range batch {
		for _, d := range it.Deltas {
			i.applyLocked(it.Key, d, now)
		}
	}
}

// flushHeldLocked gives every inline handler the keys held for it
// (listener.enqueue holds them, so that a handler gets a batch's keys in
// one call): at the end of every locked section that notifies (a batch of
// keys, a relist part, a late handler's replay, a resync), and before the
// informer announces through a channel (synced, a relist ended) what the
// handlers must have been told by then, since those waiting on the channel
// do not take the lock.
func (i *SharedIndexInformer[T]) flushHeldLocked() {
	for _, l := range i.listeners {
		if len(l.held) > 0 {
			l.flushHeld()
		}
	}
}

// applyLocked writes one delta of key to the cache and notifies.
func (i *SharedIndexInformer[T]) applyLocked(key string, d deltafifo.Delta[T], now time.Time) {
	if d.Type == deltafifo.Deleted {
		i.removeLocked(key, d.Object, false, now)
		return
	}
	i.upsertLocked(key, d.Object, false, now)
}

// upsertLocked writes obj under key and notifies: an add for a key the
// cache did not hold, an update from the cached object otherwise. In a
// relist, an update only when the object changed. The notification
// carries the key string the cache holds (store.Indexer.PutKey), not the
// one computed for this event, so that handlers, queues and reads by key
// share one string per object.
func (i *SharedIndexInformer[T]) upsertLocked(key string, obj T, relist bool, now time.Time) {
	stored, old, existed, err := i.idx.PutKey(key, obj)
	if err != nil {
		i.log.Error("informer: cache write failed", "informer", i.name, "key", key, "err", err)
		return
	}
	key = stored
	i.det.stored(key, obj)
	switch {
	case !existed:
		i.dispatchLocked(key, notification[T]{Type: handler.AddEvent, Obj: obj, Initial: relist && !i.synced}, now)
	case relist && object.Recreated(old, obj):
		// Deleted and created again while the watch was down (or its
		// delete still queued when this relist superseded it): the old
		// object's end (with the final state of that queued delete, else
		// unknown), then the new one, never an update from one object to
		// another.
		i.dispatchLocked(key, notification[T]{Type: handler.DeleteEvent, Deleted: i.relistTombstoneLocked(key, old)}, now)
		i.dispatchLocked(key, notification[T]{Type: handler.AddEvent, Obj: obj, Initial: !i.synced}, now)
	case !relist: // a watch's event: a new version
		i.dispatchLocked(key, notification[T]{Type: handler.UpdateEvent, Old: old, Obj: obj}, now)
	case changed(old, obj):
		i.dispatchLocked(key, notification[T]{Type: handler.UpdateEvent, Old: old, Obj: obj}, now)
	case i.distrust:
		i.dispatchLocked(key, notification[T]{Type: handler.UpdateEvent, Old: old, Obj: obj, Resync: true}, now)
	}
}

// removeLocked deletes key and, if the cache held it, notifies a delete
// carrying obj, the deleted state.
func (i *SharedIndexInformer[T]) removeLocked(key string, obj T, finalStateUnknown bool, now time.Time) {
	if _, existed := i.idx.Remove(key, obj.GetResourceVersion()); existed {
		i.det.removed(key)
		i.dispatchLocked(key, notification[T]{Type: handler.DeleteEvent,
			Deleted: tombstone(key, obj, finalStateUnknown)}, now)
	}
}

// relistPart applies one part of a relist given in parts, as it arrives:
// listed objects are written at once (notifying adds, and updates for
// objects whose resource version changed), so the cache never holds the old
// and the new state of the whole collection at the same time; at the end,
// every cached object the relist did not give is deleted (tombstones with
// the last known object, FinalStateUnknown, or relistTombstoneLocked's
// final state). The end of the first relist
// marks the informer synced once every handler has been handed its
// notifications.
func (i *SharedIndexInformer[T]) relistPart(p *deltafifo.RelistPart[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	defer i.flushHeldLocked()
	if p.Begin {
		i.keepFinalsLocked(p.Finals)
	}
	if i.atomic {
		i.holdPartLocked(p)
		return
	}
	now := time.Now()
	if p.Begin {
		i.idx.BeginRelist()
		i.relisting = true
		i.distrust = i.snap.relistBegins(i.refl.Resume())
	}
	for _, obj := range p.Items {
		key, err := object.MetaNamespaceKeyFunc(obj)
		if err != nil {
			i.log.Error("informer: relist item without a valid key", "informer", i.name, "err", err)
			continue
		}
		i.upsertLocked(key, obj, true, now)
	}
	for _, obj := range p.Deleted {
		if key, err := object.MetaNamespaceKeyFunc(obj); err == nil {
			i.removeLocked(key, obj, false, now)
		}
	}
	if !p.End {
		return
	}
	i.relisting, i.distrust = false, false
	if !p.Abandoned {
		for _, gone := range i.idx.EndRelist(p.ResourceVersion) {
			i.det.removed(gone.Key)
			i.dispatchLocked(gone.Key, notification[T]{Type: handler.DeleteEvent,
				Deleted: i.relistTombstoneLocked(gone.Key, gone.Object)}, now)
		}
		i.finals = nil
		i.snap.relistEnds(i.refl.Resume())
		i.markSyncedLocked()
	}
	i.relistEndedLocked(p.Seq)
}

// relistEndedLocked counts a relist as ended, applied or abandoned.
func (i *SharedIndexInformer[T]) relistEndedLocked(seq uint64) {
	i.flushHeldLocked()
	i.relists = max(i.relists, seq) // a relist superseded in the FIFO is never applied: its successor counts
	close(i.relisted)
	i.relisted = make(chan struct{})
}

// heldRelist is an atomic relist's state so far: the listed objects by
// key, in the order first listed.
type heldRelist[T object.Object] struct {
	keys []string
	objs map[string]T
}

// holdPartLocked adds one part of a relist to the held one (AtomicRelist)
// and, at its end, swaps the whole of it into the cache.
func (i *SharedIndexInformer[T]) holdPartLocked(p *deltafifo.RelistPart[T]) {
	if p.Begin || i.held == nil { // a relist begun again supersedes the one held
		i.held = &heldRelist[T]{objs: map[string]T{}}
		i.snap.relistBegins(i.refl.Resume()) // a superseded snapshot was never applied: nothing to distrust
	}
	h := i.held
	for _, obj := range p.Items {
		key, err := object.MetaNamespaceKeyFunc(obj)
		if err != nil {
			i.log.Error("informer: relist item without a valid key", "informer", i.name, "err", err)
			continue
		}
		if _, ok := h.objs[key]; !ok {
			h.keys = append(h.keys, key)
		}
		h.objs[key] = obj
	}
	for _, obj := range p.Deleted {
		if key, err := object.MetaNamespaceKeyFunc(obj); err == nil {
			delete(h.objs, key) // its key stays in h.keys, skipped by swapLocked
		}
	}
	if !p.End {
		return
	}
	i.held = nil
	if !p.Abandoned {
		i.swapLocked(h, p.ResourceVersion)
		i.snap.relistEnds(i.refl.Resume())
		i.markSyncedLocked()
	}
	i.relistEndedLocked(p.Seq)
}

// swapLocked replaces the cache's content with h at once (readers see the
// old content or the new, never a mix), then notifies: deletes
// (FinalStateUnknown) for keys the relist no longer has, then adds for new
// keys and updates for objects that changed.
func (i *SharedIndexInformer[T]) swapLocked(h *heldRelist[T], rv string) {
	type change struct {
		key string
		obj T               // the object written; zero for a key removed
		n   notification[T] // kind 0: nothing to tell
	}
	items := make([]T, 0, len(h.objs))
	changes := make([]change, 0, len(h.objs))
	written := make(map[string]struct{}, len(h.objs))
	var removed []change // deleted or recreated: told first
	for _, key := range h.keys {
		obj, ok := h.objs[key]
		if !ok {
			continue // deleted while the relist was sent, or listed twice
		}
		delete(h.objs, key)
		written[key] = struct{}{}
		items = append(items, obj)
		c := change{key: key, obj: obj}
		switch old, existed := i.idx.GetByKey(key); {
		case !existed:
			c.n = notification[T]{Type: handler.AddEvent, Obj: obj, Initial: !i.synced}
		case object.Recreated(old, obj):
			removed = append(removed, change{key: key, n: notification[T]{Type: handler.DeleteEvent, Deleted: i.relistTombstoneLocked(key, old)}})
			c.n = notification[T]{Type: handler.AddEvent, Obj: obj, Initial: !i.synced}
		case changed(old, obj):
			c.n = notification[T]{Type: handler.UpdateEvent, Old: old, Obj: obj}
		}
		changes = append(changes, c)
	}
	for _, key := range i.idx.ListKeys() {
		if _, ok := written[key]; !ok {
			old, _ := i.idx.GetByKey(key)
			removed = append(removed, change{key: key, n: notification[T]{Type: handler.DeleteEvent, Deleted: i.relistTombstoneLocked(key, old)}})
		}
	}
	if err := i.idx.Replace(items, rv); err != nil {
		i.log.Error("informer: relist could not be applied; the cache keeps its content", "informer", i.name, "err", err)
		return
	}
	i.finals = nil
	// Deletes first, then adds and updates in the order listed, as
	// client-go's atomic relist tells them.
	now := time.Now()
	for _, c := range removed {
		i.det.removed(c.key)
		i.dispatchLocked(c.key, c.n, now)
	}
	for _, c := range changes {
		i.det.stored(c.key, c.obj)
		if c.n.Type != 0 {
			i.dispatchLocked(c.key, c.n, now)
		}
	}
}

// markSyncedLocked marks the informer synced after its first relist.
func (i *SharedIndexInformer[T]) markSyncedLocked() {
	if i.synced {
		return
	}
	i.synced = true
	for _, l := range i.listeners {
		l.arm()
	}
	i.flushHeldLocked() // WaitForCacheSync waits on syncedC without the lock
	for _, l := range i.listeners {
		l.noteSynced()
	}
	close(i.syncedC)
}

// changed reports that a relist found a new state of a cached object: its
// resource version moved, or there is none to compare (a source without
// resource versions).
func changed[T object.Object](cached, listed T) bool {
	rv := listed.GetResourceVersion()
	return rv == "" || rv != cached.GetResourceVersion()
}

// transformSink runs the informer's transform on each object on its way
// from the reflector to the FIFO.
type transformSink[T object.Object] struct {
	next   *deltafifo.FIFO[T]
	fn     func(T) (T, error) // nil: none
	size   func(n int)        // the informer's reserve
	failed bool               // the relist in progress lost an item to the transform; reflector goroutine only
	// abandoned is told of each relist dropped for a transform error,
	// with how many in a row (the informer lists again after a backoff).
	abandoned func(cause error, inARow int)
	inARow    int   // relists dropped in a row; reflector goroutine only
	cause     error // the transform error that dropped the relist in progress
}

// RelistSize sizes the store, and the handlers' queues, for a list of n
// objects if the store holds none yet (the first list;
// reflector.RelistSizer).
func (s *transformSink[T]) RelistSize(n int) { s.size(n) }

// reserve readies an empty store for n objects about to be applied: the
// store makes room for them, unless relists are atomic (those are swapped
// in whole, into a store built for them, so a reserved map would only be
// waste), and so do the queues of the handlers that take the hint
// (handler.Enqueuer, as EnqueueKey's), each of the n objects being
// a new key for them. A handler's panic is recovered and counted as in any
// of its calls.
func (i *SharedIndexInformer[T]) reserve(n int) {
	i.mu.Lock()
	var expecters []*listener[T]
	if i.idx.Len() == 0 {
		for _, l := range i.listeners {
			if l.sink != nil {
				expecters = append(expecters, l)
			}
		}
	}
	i.mu.Unlock()
	if !i.atomic {
		i.idx.Reserve(n)
	}
	for _, l := range expecters {
		l.guarded(0, func() { l.sink.ExpectKeys(n) })
	}
}

func (s *transformSink[T]) transform(obj T) (T, error) {
	if s.fn == nil {
		return obj, nil
	}
	out, err := s.fn(obj)
	if err != nil {
		return out, fmt.Errorf("informer: transform %s: %w", object.NameOf(obj), err)
	}
	return out, nil
}

// Replace is a relist in one part (the reflector gives relists in parts;
// Replace completes the Sink interface).
func (s *transformSink[T]) Replace(items []T, rv string) error {
	if err := s.BeginRelist(); err != nil {
		return err
	}
	if err := s.RelistItems(items); err != nil {
		return err
	}
	return s.EndRelist(rv)
}

func (s *transformSink[T]) Add(obj T) error    { return s.upsert(obj, s.next.Add) }
func (s *transformSink[T]) Update(obj T) error { return s.upsert(obj, s.next.Update) }

// Delete queues the delete even if the transform fails: only the key
// matters to the cache, and a lost delete would keep a stale object.
func (s *transformSink[T]) Delete(obj T) error {
	out, err := s.transform(obj)
	if err != nil {
		if qerr := s.next.Delete(obj); qerr != nil {
			return qerr
		}
		return err
	}
	return s.next.Delete(out)
}
func (s *transformSink[T]) Bookmark(rv string) { s.next.Bookmark(rv) }

// BeginRelist starts a relist given in parts. A transform error in one of
// its items drops the rest of it, its end included: the cache keeps what
// it had (and the items already applied) and deletes nothing for it.
func (s *transformSink[T]) BeginRelist() error {
	s.failed = false
	return s.next.BeginRelist()
}

func (s *transformSink[T]) RelistItems(items []T) error {
	if s.failed {
		return nil
	}
	for k, obj := range items { // in place: the page is the reflector's to give
		var err error
		if items[k], err = s.transform(obj); err != nil {
			s.failed, s.cause = true, err
			return fmt.Errorf("%w (the rest of this relist is dropped)", err)
		}
	}
	return s.next.RelistItems(items)
}

func (s *transformSink[T]) RelistDelete(obj T) error {
	if s.failed {
		return nil
	}
	out, err := s.transform(obj)
	if err != nil {
		out = obj // only the key matters to the cache
	}
	return s.next.RelistDelete(out)
}

func (s *transformSink[T]) EndRelist(rv string) error {
	if s.failed {
		s.next.AbandonRelist() // counted as an end, as the reflector counts it, so Relist does not wait for it forever
		s.inARow++
		if s.abandoned != nil {
			s.abandoned(s.cause, s.inARow)
		}
		return nil
	}
	s.inARow = 0
	return s.next.EndRelist(rv)
}

func (s *transformSink[T]) upsert(obj T, next func(T) error) error {
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	return next(obj)
}

// tombstone is the delete notification of the cache entry key, which held
// obj.
// keepFinalsLocked keeps, of the final states a relist superseded, those
// of the objects the cache holds (the same life: not object.Recreated), the newest
// last: their deletion is then told with them at the relist's end.
func (i *SharedIndexInformer[T]) keepFinalsLocked(finals []T) {
	for _, f := range finals {
		key, err := object.MetaNamespaceKeyFunc(f)
		if err != nil {
			continue
		}
		if cached, ok := i.idx.GetByKey(key); ok && !object.Recreated(cached, f) {
			if i.finals == nil {
				i.finals = map[string]T{}
			}
			i.finals[key] = f
		}
	}
}

// relistTombstoneLocked is the deletion a relist tells of cached, which it
// no longer lists (or lists under another UID): with the final state the
// watch delivered when it had (keepFinalsLocked), else with cached and
// FinalStateUnknown.
func (i *SharedIndexInformer[T]) relistTombstoneLocked(key string, cached T) object.Deleted[T] {
	if f, ok := i.finals[key]; ok && !object.Recreated(cached, f) {
		return tombstone(key, f, false)
	}
	return tombstone(key, cached, true)
}

func tombstone[T object.Object](key string, obj T, finalStateUnknown bool) object.Deleted[T] {
	name, err := object.ParseObjectName(key)
	if err != nil { // the cache holds only valid keys
		name = object.NameOf(obj)
	}
	return object.Deleted[T]{Name: name, Obj: obj, HasObj: true, FinalStateUnknown: finalStateUnknown}
}
