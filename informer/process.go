package informer

import (
	"context"
	"fmt"
	"time"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/object"
)

// processLoop pops the FIFO until it is closed or ctx ends, applying each
// Item to the cache and queuing the notifications it causes. It is the
// cache's only writer.
func (i *SharedIndexInformer[T]) processLoop(ctx context.Context) {
	for {
		it, err := i.fifo.Pop(ctx)
		if err != nil {
			return
		}
		switch {
		case it.Replace != nil:
			i.replace(it.Replace.Items, it.Replace.ResourceVersion)
		case it.Key != "":
			for _, d := range it.Deltas {
				i.apply(it.Key, d)
			}
		default:
			i.idx.Bookmark(it.Bookmark)
		}
	}
}

// dispatchLocked queues n for key with every handler.
func (i *SharedIndexInformer[T]) dispatchLocked(key string, n notification[T], now time.Time) {
	for _, l := range i.listeners {
		l.enqueue(key, n, now)
	}
}

// apply writes one delta to the cache and notifies: an upsert is an add
// for a key the cache did not hold and an update from the cached object
// otherwise (so a compacted burst reads old -> newest); a delete of a
// cached key carries the deleted object, and a delete of a key the cache
// never held notifies nobody.
func (i *SharedIndexInformer[T]) apply(key string, d deltafifo.Delta[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	old, existed := i.idx.GetByKey(key)
	now := time.Now()
	if d.Type == deltafifo.Deleted {
		if err := i.idx.Delete(d.Object); err != nil {
			i.log.Error("informer: cache delete failed", "informer", i.name, "key", key, "err", err)
			return
		}
		if existed {
			i.dispatchLocked(key, notification[T]{kind: deleteKind,
				del: object.Deleted[T]{Key: key, Obj: d.Object, HasObj: true}}, now)
		}
		return
	}
	if err := i.idx.Update(d.Object); err != nil {
		i.log.Error("informer: cache write failed", "informer", i.name, "key", key, "err", err)
		return
	}
	if existed {
		i.dispatchLocked(key, notification[T]{kind: updateKind, old: old, obj: d.Object}, now)
	} else {
		i.dispatchLocked(key, notification[T]{kind: addKind, obj: d.Object}, now)
	}
}

// replace swaps the cache for items in one step, then notifies: deletes
// (final state unknown, carrying the last cached object) for keys that
// vanished, updates for keys kept whose resource version changed, adds for
// new keys. An object the relist found unchanged notifies nobody: a 410 on
// a big cache must not re-enqueue every object of it. The first replace
// marks the informer synced once every handler has been handed its
// notifications.
func (i *SharedIndexInformer[T]) replace(items []T, rv string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	before := i.idx.List()
	if err := i.idx.Replace(items, rv); err != nil {
		i.log.Error("informer: relist could not be cached", "informer", i.name, "err", err)
		return
	}
	old := make(map[string]T, len(before))
	for _, o := range before {
		old[object.NameOf(o).String()] = o
	}
	initial := !i.synced
	i.notifyReplaceLocked(old, items, initial)
	if initial {
		i.synced = true
		for _, l := range i.listeners {
			l.arm()
		}
		close(i.syncedC)
	}
}

// notifyReplaceLocked queues the notifications of a relist from the cached
// objects old (by key) to items, in the order the package promises.
func (i *SharedIndexInformer[T]) notifyReplaceLocked(old map[string]T, items []T, initial bool) {
	keys := make([]string, len(items))
	kept := make(map[string]bool, len(items))
	for k, o := range items {
		keys[k] = object.NameOf(o).String()
		kept[keys[k]] = true
	}
	now := time.Now()
	for key, o := range old {
		if !kept[key] {
			i.dispatchLocked(key, notification[T]{kind: deleteKind,
				del: object.Deleted[T]{Key: key, Obj: o, HasObj: true, FinalStateUnknown: true}}, now)
		}
	}
	for k, o := range items {
		if prev, ok := old[keys[k]]; ok && changed(prev, o) {
			i.dispatchLocked(keys[k], notification[T]{kind: updateKind, old: prev, obj: o}, now)
		}
	}
	for k, o := range items {
		if _, ok := old[keys[k]]; !ok {
			i.dispatchLocked(keys[k], notification[T]{kind: addKind, obj: o, initial: initial}, now)
		}
	}
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
	next *deltafifo.FIFO[T]
	fn   func(T) (T, error) // nil: none
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

func (s *transformSink[T]) Replace(items []T, rv string) error {
	out := make([]T, len(items))
	for k, obj := range items {
		var err error
		if out[k], err = s.transform(obj); err != nil {
			return err
		}
	}
	return s.next.Replace(out, rv)
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

func (s *transformSink[T]) upsert(obj T, next func(T) error) error {
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	return next(obj)
}
