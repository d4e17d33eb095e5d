package reflector

import (
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/object"
)

// memSink is a Sink that keeps objects by key and signals every change, so
// tests wait for conditions instead of sleeping.
type memSink[T object.Object] struct {
	mu       sync.Mutex
	objs     map[string]T
	rv       string
	replaces int
	changed  chan struct{} // buffer 1: "something changed since you last looked"
	failNext bool          // the next Add returns an error
}

func newMemSink[T object.Object]() *memSink[T] {
	return &memSink[T]{objs: map[string]T{}, changed: make(chan struct{}, 1)}
}

func (s *memSink[T]) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *memSink[T]) Replace(items []T, rv string) error {
	s.mu.Lock()
	s.objs = map[string]T{}
	for _, it := range items {
		k, _ := object.MetaNamespaceKeyFunc(it)
		s.objs[k] = it
	}
	s.rv = rv
	s.replaces++
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *memSink[T]) put(obj T) {
	k, _ := object.MetaNamespaceKeyFunc(obj)
	s.mu.Lock()
	s.objs[k] = obj
	s.rv = obj.GetResourceVersion()
	s.mu.Unlock()
	s.signal()
}

func (s *memSink[T]) Add(obj T) error {
	s.mu.Lock()
	fail := s.failNext
	s.failNext = false
	s.mu.Unlock()
	if fail {
		return errSinkFull
	}
	s.put(obj)
	return nil
}

func (s *memSink[T]) Update(obj T) error { s.put(obj); return nil }

func (s *memSink[T]) Delete(obj T) error {
	k, _ := object.MetaNamespaceKeyFunc(obj)
	s.mu.Lock()
	delete(s.objs, k)
	s.rv = obj.GetResourceVersion()
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *memSink[T]) Bookmark(rv string) {
	s.mu.Lock()
	s.rv = rv
	s.mu.Unlock()
	s.signal()
}

// snapshot returns the keys held and the number of replaces so far.
func (s *memSink[T]) snapshot() (keys map[string]string, replaces int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys = map[string]string{}
	for k, o := range s.objs {
		keys[k] = o.GetResourceVersion()
	}
	return keys, s.replaces
}

// waitFor blocks until cond holds for the sink's keys, or fails t after d.
func (s *memSink[T]) waitFor(t *testing.T, d time.Duration, what string, cond func(keys map[string]string, replaces int) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		if cond(s.snapshot()) {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			keys, replaces := s.snapshot()
			t.Fatalf("timed out after %s waiting for %s; sink has %d objects after %d replaces", d, what, len(keys), replaces)
		}
	}
}
