package store

import "github.com/ctrlkit/ctrlkit/object"

// Get returns the object stored under obj's key. exists is false if there is
// none; err is set only when obj has no valid key. The returned object is
// shared with the store: read it, never modify it. Safe for concurrent use;
// it waits only for a writer that holds the lock (or the first read by
// namespace, which builds that index).
func (s *Indexer[T]) Get(obj T) (item T, exists bool, err error) {
	key, err := keyOf(obj)
	if err != nil {
		return item, false, err
	}
	item, exists = s.GetByKey(key)
	return item, exists, nil
}

// getByName is GetByKey of name's key ("namespace/name", or "name"),
// built in a buffer on the stack: a map lookup through string(bytes)
// copies nothing, so a reconcile's read by typed name allocates no key.
func (s *Indexer[T]) getByName(name object.ObjectName) (item T, exists bool) {
	if name.Namespace == "" {
		return s.GetByKey(name.Name)
	}
	var buf [256]byte // a longer key spills to the heap, as String would
	key := append(append(append(buf[:0], name.Namespace...), '/'), name.Name...)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.c.items[string(key)]; e != nil {
		return e.obj, true
	}
	return item, false
}

// GetByKey returns the object stored under key ("namespace/name" or
// "name"), and whether there is one. The object is read-only for the caller.
func (s *Indexer[T]) GetByKey(key string) (item T, exists bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.c.items[key]; e != nil {
		return e.obj, true
	}
	return item, false
}

// Len returns the number of objects in the store.
func (s *Indexer[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.c.items)
}

// List returns every object in the store, in no particular order. The slice
// is a snapshot the caller owns; the objects are read-only.
func (s *Indexer[T]) List() []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]T, 0, len(s.c.items))
	for _, e := range s.c.items {
		out = append(out, e.obj)
	}
	return out
}

// ListKeys returns the key of every object in the store, in no particular
// order. The caller owns the slice.
func (s *Indexer[T]) ListKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.c.items))
	for key := range s.c.items {
		out = append(out, key)
	}
	return out
}

// ByIndex returns the objects whose values in the named index include value
// (for NamespaceIndex: the objects of one namespace), in no particular order.
// An unknown index is an error wrapping ErrNoIndex. The caller owns the
// slice; the objects are read-only.
func (s *Indexer[T]) ByIndex(indexName, value string) ([]T, error) {
	return readIndex(s, indexName, func(c *cache[T], i int) []T { return c.objectsUnder(i, value) })
}

// IndexKeys is ByIndex returning keys instead of objects. (The namespace
// index keeps objects only: for it, the keys are made again from them.)
func (s *Indexer[T]) IndexKeys(indexName, value string) ([]string, error) {
	return readIndex(s, indexName, func(c *cache[T], i int) []string { return c.keysUnder(i, value) })
}

// readIndex returns read of the cache and the position of the named index,
// called under the store's read lock; an unknown index is an error
// wrapping ErrNoIndex.
func readIndex[T object.Object, R any](s *Indexer[T], indexName string, read func(c *cache[T], i int) R) (R, error) {
	i, err := s.funcs.Load().lookup(indexName)
	if err != nil {
		var zero R
		return zero, err
	}
	s.rlockIndex(i)
	defer s.mu.RUnlock()
	return read(s.c, i), nil
}

// Index returns the objects that share at least one value with obj in the
// named index: it runs the index function on obj (without the lock) and
// returns the union of ByIndex over the values, each object once. obj need
// not be in the store. The error of an unknown index wraps ErrNoIndex, that
// of the index function ErrIndexFunc.
func (s *Indexer[T]) Index(indexName string, obj T) ([]T, error) {
	fs := s.funcs.Load()
	i, err := fs.lookup(indexName)
	if err != nil {
		return nil, err
	}
	vals, err := fs.value(i, object.NameOf(obj).String(), obj)
	if err != nil {
		return nil, err
	}
	s.rlockIndex(i)
	defer s.mu.RUnlock()
	if len(vals) == 1 { // always, for the namespace index
		return s.c.objectsUnder(i, vals[0]), nil
	}
	idx := s.c.indices[i]
	union := keySet{}
	for _, v := range vals {
		for key := range idx[v] {
			union[key] = struct{}{}
		}
	}
	return s.c.objects(union), nil
}

// ListIndexFuncValues returns the values present in the named index (each
// carried by at least one object), in no particular order. An unknown index
// is an error wrapping ErrNoIndex. The caller owns the slice.
func (s *Indexer[T]) ListIndexFuncValues(indexName string) ([]string, error) {
	return readIndex(s, indexName, (*cache[T]).valuesOf)
}
