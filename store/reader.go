package store

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ctrlkit/ctrlkit/object"
)

// Reader is the read-only view of an Indexer that reconcilers are given: get
// by typed name, list by namespace and label selector, look up an index (as
// client-go's Indexer: ByIndex, IndexKeys, Index, ListIndexFuncValues). It
// cannot write, so the informer stays the cache's only writer. It adds no
// state: safe for concurrent use; returned objects are the cache's, to read
// and never modify (DeepCopy before changing one).
type Reader[T object.Object] struct {
	s *Indexer[T]
}

// NewReader returns a read-only view of s.
func NewReader[T object.Object](s *Indexer[T]) Reader[T] { return Reader[T]{s: s} }

// Get returns the object called name, and whether the cache holds it. It
// allocates nothing (the key is built on the stack).
func (r Reader[T]) Get(name object.ObjectName) (T, bool) { return r.s.getByName(name) }

// GetByKey returns the object whose MetaNamespaceKeyFunc key is key, for
// controllers keyed by such strings (handler.EnqueueKey), as in client-go.
func (r Reader[T]) GetByKey(key string) (T, bool) { return r.s.GetByKey(key) }

// List returns the objects of namespace ("" for every namespace) whose labels
// match selector (nil selects everything), in no particular order. An object
// type without labels matches only an empty selector. The caller owns the
// slice.
func (r Reader[T]) List(namespace string, selector labels.Selector) []T {
	var objs []T
	if namespace == "" {
		objs = r.s.List()
	} else {
		objs, _ = r.s.ByIndex(NamespaceIndex, namespace) // every store has the namespace index
	}
	if selector == nil || selector.Empty() {
		return objs
	}
	out := objs[:0]
	for _, obj := range objs {
		if l, ok := any(obj).(object.Labeled); ok && selector.Matches(labels.Set(l.GetLabels())) {
			out = append(out, obj)
		}
	}
	return out
}

// ByIndex returns the objects whose values in the named index include value;
// see Indexer.ByIndex.
func (r Reader[T]) ByIndex(indexName, value string) ([]T, error) {
	return r.s.ByIndex(indexName, value)
}

// IndexKeys returns the keys of the objects whose values in the named index
// include value; see Indexer.IndexKeys.
func (r Reader[T]) IndexKeys(indexName, value string) ([]string, error) {
	return r.s.IndexKeys(indexName, value)
}

// Index returns the cached objects that share at least one value with obj
// in the named index; see Indexer.Index.
func (r Reader[T]) Index(indexName string, obj T) ([]T, error) { return r.s.Index(indexName, obj) }

// ListIndexFuncValues returns the values present in the named index; see
// Indexer.ListIndexFuncValues.
func (r Reader[T]) ListIndexFuncValues(indexName string) ([]string, error) {
	return r.s.ListIndexFuncValues(indexName)
}

// Keys returns the names of the cached objects, in no particular order.
// The caller owns the slice.
func (r Reader[T]) Keys() []object.ObjectName {
	keys := r.s.ListKeys()
	names := make([]object.ObjectName, 0, len(keys))
	for _, k := range keys {
		if n, err := object.ParseObjectName(k); err == nil { // the store holds only valid keys
			names = append(names, n)
		}
	}
	return names
}

// Len returns the number of cached objects.
func (r Reader[T]) Len() int { return r.s.Len() }

// ResourceVersion returns the resource version the cache reflects; see
// Indexer.ResourceVersion.
func (r Reader[T]) ResourceVersion() string { return r.s.ResourceVersion() }
