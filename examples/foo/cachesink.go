package foo

import (
	"sync/atomic"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// cacheSink keeps a store current from a reflector and queues the key of
// everything that changes. It stands in for the shared informer (issue 5),
// which will replace it; the reconciler does not change.
type cacheSink[T object.Object] struct {
	cache  *store.Indexer[T]
	keyOf  func(T) (string, bool)
	queue  interface{ Add(string) }
	synced atomic.Bool
}

func (s *cacheSink[T]) enqueue(o T) {
	if k, ok := s.keyOf(o); ok {
		s.queue.Add(k)
	}
}

// Replace swaps the cache and queues every key before and after, so
// vanished objects are reconciled too.
func (s *cacheSink[T]) Replace(items []T, rv string) error {
	for _, o := range s.cache.List() {
		s.enqueue(o)
	}
	err := s.cache.Replace(items, rv)
	for _, o := range items {
		s.enqueue(o)
	}
	s.synced.Store(true)
	return err
}

func (s *cacheSink[T]) Add(o T) error      { err := s.cache.Add(o); s.enqueue(o); return err }
func (s *cacheSink[T]) Update(o T) error   { return s.Add(o) }
func (s *cacheSink[T]) Delete(o T) error   { err := s.cache.Delete(o); s.enqueue(o); return err }
func (s *cacheSink[T]) Bookmark(rv string) { s.cache.Bookmark(rv) }
