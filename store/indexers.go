package store

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ctrlkit/ctrlkit/object"
)

// NamespaceIndex is the name of the index every Indexer has: objects by
// namespace ("" for cluster-scoped objects). Listers use it.
const NamespaceIndex = "namespace"

// IndexFunc computes the values under which an object is indexed. It may
// return several values (an object is then found under each), none, or an
// error, which makes the write that called it fail without changing the
// store.
//
// It is user code: the store calls it without holding its lock, possibly
// from several goroutines at once, so it must be safe for concurrent use and
// must depend only on the object. The store keeps the returned slice: do not
// modify it after returning it.
type IndexFunc[T object.Object] func(obj T) ([]string, error)

// Indexers names index functions.
type Indexers[T object.Object] map[string]IndexFunc[T]

// MetaNamespaceIndexFunc indexes an object by its namespace. It is the
// function behind NamespaceIndex.
func MetaNamespaceIndexFunc[T object.Object](obj T) ([]string, error) {
	return []string{obj.GetNamespace()}, nil
}

// indexFuncs is an ordered list of index functions. Adding indexers
// publishes a new list that extends the old one, so the position of an index
// never changes once assigned. Everything but ready is immutable once
// published.
type indexFuncs[T object.Object] struct {
	names []string
	fns   []IndexFunc[T]
	pos   map[string]int // name -> position in names and fns
	// ready is the number of indexes that lookups may use. The rest are
	// being built by AddIndexers: writers already maintain them, but the
	// objects stored before them are not all indexed yet. It only grows,
	// to len(fns).
	ready atomic.Int64
}

// newIndexFuncs returns the list holding only the namespace index.
func newIndexFuncs[T object.Object]() *indexFuncs[T] {
	fs := &indexFuncs[T]{
		names: []string{NamespaceIndex},
		fns:   []IndexFunc[T]{MetaNamespaceIndexFunc[T]},
		pos:   map[string]int{NamespaceIndex: 0},
	}
	fs.ready.Store(1)
	return fs
}

// with returns a new list: fs followed by add in name order, with only the
// indexes of fs ready. A name already in fs, an empty name or a nil
// function is an error.
func (fs *indexFuncs[T]) with(add Indexers[T]) (*indexFuncs[T], error) {
	names := make([]string, 0, len(add))
	for name, fn := range add {
		if _, dup := fs.pos[name]; dup {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateIndex, name)
		}
		if name == "" || fn == nil {
			return nil, fmt.Errorf("%w: index %q needs a name and a function", ErrInvalidIndex, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	next := &indexFuncs[T]{
		names: slices.Concat(fs.names, names),
		fns:   slices.Clone(fs.fns),
		pos:   make(map[string]int, len(fs.names)+len(names)),
	}
	for _, name := range names {
		next.fns = append(next.fns, add[name])
	}
	for i, name := range next.names {
		next.pos[name] = i
	}
	next.ready.Store(int64(len(fs.fns)))
	return next, nil
}

// lookup returns the position of the named index, if it is ready.
func (fs *indexFuncs[T]) lookup(name string) (int, error) {
	i, ok := fs.pos[name]
	if !ok || int64(i) >= fs.ready.Load() {
		return 0, fmt.Errorf("%w: %q", ErrNoIndex, name)
	}
	return i, nil
}

// values calls the functions from position from onwards on obj, whose key is
// key, and returns their results in order. It calls user code: never call it
// with the store's lock held.
func (fs *indexFuncs[T]) values(key string, obj T, from int) ([][]string, error) {
	vals := make([][]string, len(fs.fns)-from)
	for i := range vals {
		v, err := fs.value(from+i, key, obj)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// valuesAfterNamespace calls the functions after the namespace index on
// obj, whose key is key: nil when there are none. It calls user code: never
// call it with the store's lock held.
func (fs *indexFuncs[T]) valuesAfterNamespace(key string, obj T) ([][]string, error) {
	if len(fs.fns) == 1 {
		return nil, nil
	}
	return fs.values(key, obj, 1)
}

// value calls the index function at position i on obj, whose key is key.
// It calls user code: never call it with the store's lock held.
func (fs *indexFuncs[T]) value(i int, key string, obj T) ([]string, error) {
	v, err := fs.fns[i](obj)
	if err != nil {
		return nil, fmt.Errorf("%w: index %q, object %q: %w", ErrIndexFunc, fs.names[i], key, err)
	}
	return v, nil
}

// stored identifies one write of an object, to index it later.
type stored[T object.Object] struct {
	key string
	obj T
	seq uint64
}

// AddIndexers adds index functions to the store, which may already hold
// objects: every object is indexed by the new functions before they become
// visible, so a ByIndex on a new index never misses an object. A name
// already in use (including NamespaceIndex) is an error wrapping
// ErrDuplicateIndex; an empty name or nil function one wrapping
// ErrInvalidIndex; an index function's error wraps ErrIndexFunc. On error
// nothing is added.
//
// It never runs the new functions under the store's lock, and neither
// readers nor writers wait for them: it publishes them as "building" (from
// then on every write computes them too, and a write they fail on fails),
// indexes the objects already stored without the lock, then links the
// results in. Calls to AddIndexers are serialised among themselves, so an
// index function must not call AddIndexers. Safe for concurrent use.
func (s *Indexer[T]) AddIndexers(add Indexers[T]) error {
	if len(add) == 0 {
		return nil
	}
	s.addMu.Lock()
	defer s.addMu.Unlock()
	old, next, pending, err := s.startBuild(add)
	if err != nil {
		return err
	}
	vals := make([][][]string, len(pending))
	for i, p := range pending {
		if vals[i], err = next.values(p.key, p.obj, len(old.fns)); err != nil {
			s.abortBuild(old)
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range pending {
		s.c.fill(p.key, p.seq, vals[i])
	}
	next.ready.Store(int64(len(next.fns)))
	return nil
}

// startBuild publishes the functions of add as building and returns the
// previous list, the new one, and the objects stored before it.
func (s *Indexer[T]) startBuild(add Indexers[T]) (old, next *indexFuncs[T], pending []stored[T], err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old = s.funcs.Load()
	if next, err = old.with(add); err != nil {
		return nil, nil, nil, err
	}
	s.c.grow(len(add))
	s.funcs.Store(next)
	pending = make([]stored[T], 0, len(s.c.items))
	for key, e := range s.c.items {
		pending = append(pending, stored[T]{key: key, obj: e.obj, seq: e.seq})
	}
	return old, next, pending, nil
}

// abortBuild goes back to the functions of old, dropping what writers put in
// the indexes being built.
func (s *Indexer[T]) abortBuild(old *indexFuncs[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.shrink(len(old.fns))
	s.funcs.Store(old)
}
