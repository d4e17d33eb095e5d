package store

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// Lister reads an Indexer the way a controller reads the API: by label
// selector, by namespace, and by name with NotFound errors like the API
// server's. It is what a worker uses to get the object for a key (step 9 of
// the pipeline). It adds no state: it is safe for concurrent use, and
// returned objects are the store's, read-only for the caller.
type Lister[T object.Labeled] struct {
	s        *Indexer[T]
	resource schema.GroupResource
}

// NewLister returns a lister over the cache r reads (an informer's
// Reader). resource names what it holds (for example
// schema.GroupResource{Resource: "pods"}); it appears in NotFound errors.
func NewLister[T object.Labeled](r Reader[T], resource schema.GroupResource) *Lister[T] {
	return &Lister[T]{s: r.s, resource: resource}
}

// List returns the objects, in every namespace, whose labels match selector
// (nil selects everything), in no particular order. The caller owns the
// slice.
func (l *Lister[T]) List(selector labels.Selector) []T {
	return filter(l.s.List(), selector)
}

// Get returns the cluster-scoped object called name, or an error for which
// apierrors.IsNotFound is true.
func (l *Lister[T]) Get(name string) (T, error) {
	return l.Namespace("").Get(name)
}

// Namespace returns a lister restricted to namespace ns. The empty namespace
// (metav1.NamespaceAll) lists every namespace and gets cluster-scoped
// objects.
func (l *Lister[T]) Namespace(ns string) NamespaceLister[T] {
	return NamespaceLister[T]{l: l, ns: ns}
}

// NamespaceLister is a Lister restricted to one namespace. It is a small
// value; copy it freely.
type NamespaceLister[T object.Labeled] struct {
	l  *Lister[T]
	ns string
}

// List returns the objects of the namespace whose labels match selector (nil
// selects everything), found through NamespaceIndex, in no particular order.
// The caller owns the slice.
func (n NamespaceLister[T]) List(selector labels.Selector) []T {
	if n.ns == "" {
		return n.l.List(selector)
	}
	objs, err := n.l.s.ByIndex(NamespaceIndex, n.ns)
	if err != nil { // every store has the namespace index
		return nil
	}
	return filter(objs, selector)
}

// Get returns the object called name in the namespace, or an error for which
// apierrors.IsNotFound is true.
func (n NamespaceLister[T]) Get(name string) (T, error) {
	obj, ok := n.l.s.GetByKey(object.ObjectName{Namespace: n.ns, Name: name}.String())
	if !ok {
		return obj, apierrors.NewNotFound(n.l.resource, name)
	}
	return obj, nil
}

// filter keeps the objects of objs whose labels match selector, reusing the
// slice.
func filter[T object.Labeled](objs []T, selector labels.Selector) []T {
	if selector == nil || selector.Empty() {
		return objs
	}
	if labels.MatchesNothing(selector) {
		return objs[:0]
	}
	out := objs[:0]
	for _, obj := range objs {
		if selector.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	return out
}
