package handler

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// EnqueueObject returns a Handler that adds the typed name of every changed
// object to q, so a reconciler gets an object.ObjectName and never splits a
// string (see Names). If q is a PriorityAdder, the initial list and
// resyncs are queued at workqueue.LowPriority (as by every helper of this
// file); into a NonBlockingAdder it is an Enqueuer, which passes the
// informer's hint of a list's size to q when q is a Reserver.
func EnqueueObject[T object.Object](q Adder[object.ObjectName]) Handler[T] {
	return enqueue(q, Names[T](), true)
}

// Names is EnqueueObject's KeyFunc: the name of the changed object (an
// update's new one: both states have the same name). A tombstone is named
// by its entry's name when it has a valid one (the entry that was
// deleted), otherwise by its object; one with neither queues nothing.
//
// An informer's event is named by cutting its Key, the cache's own key
// string (see store.Indexer.PutKey): the name's parts are slices of it,
// so a queue comparing names that came this way compares pointers, and
// a name holds no string of its own.
func Names[T object.Object]() KeyFunc[T, object.ObjectName] {
	return func(dst []object.ObjectName, e *Event[T]) []object.ObjectName {
		if e.Key != "" {
			if n, err := object.ParseObjectName(e.Key); err == nil {
				return append(dst, n)
			} // not a valid key: named as an event built by hand
		}
		var n object.ObjectName
		switch {
		case e.Type != DeleteEvent:
			n = object.NameOf(e.Obj)
		case e.Deleted.Name.Validate() == nil:
			n = e.Deleted.Name
		case e.Deleted.HasObj:
			n = object.NameOf(e.Deleted.Obj)
		}
		if n.Validate() != nil {
			return dst
		}
		return append(dst, n)
	}
}

// EnqueueMapped returns a Handler that adds, for every changed object, the
// names fn maps it to (see Mapped): "which objects of my kind care about
// this one". fn runs as a KeyFunc does (see there): into a NonBlockingAdder
// the Handler is an Enqueuer, and fn runs on the informer's goroutine under
// its lock; it must not block nor call an informer's methods.
func EnqueueMapped[T object.Object](q Adder[object.ObjectName], fn func(obj T) []object.ObjectName) Handler[T] {
	return Enqueue(q, Mapped(fn))
}

// Mapped is EnqueueMapped's KeyFunc: the valid names fn maps the changed
// object to. An update maps both the old and the new object (once on a
// resync; a name both give, once), so a reference that moved queues both
// ends; a delete maps the last known object (a tombstone without one maps
// nothing).
func Mapped[T object.Object](fn func(obj T) []object.ObjectName) KeyFunc[T, object.ObjectName] {
	return eachState(func(dst []object.ObjectName, obj T) []object.ObjectName {
		for _, n := range fn(obj) {
			if n.Validate() == nil {
				dst = append(dst, n)
			}
		}
		return dst
	})
}

// eachState is the KeyFunc that appends the names add gives for each state
// of the changed object the event carries: an add's object; an update's
// old and new ones (once on a resync), the new one's names less those the
// old one gave already; a delete's last known object (a tombstone without
// one gives nothing).
func eachState[T object.Object](add func(dst []object.ObjectName, obj T) []object.ObjectName) KeyFunc[T, object.ObjectName] {
	return func(dst []object.ObjectName, e *Event[T]) []object.ObjectName {
		switch e.Type {
		case AddEvent:
			return add(dst, e.Obj)
		case UpdateEvent:
			if any(e.Old) == any(e.Obj) {
				return add(dst, e.Obj)
			}
			n0 := len(dst)
			dst = add(dst, e.Old)
			n1 := len(dst)
			dst = add(dst, e.Obj)
			kept := dst[:n1]
			for _, n := range dst[n1:] { // the new state's names the old one did not give
				if !slices.Contains(dst[n0:n1], n) {
					kept = append(kept, n)
				}
			}
			return kept
		case DeleteEvent:
			if e.Deleted.HasObj {
				return add(dst, e.Deleted.Obj)
			}
		}
		return dst
	}
}

// Owned is an object with owner references, as every Kubernetes API type.
type Owned interface {
	object.Object
	GetOwnerReferences() []metav1.OwnerReference
}

// EnqueueOwner returns a Handler that adds the name of the object of kind
// owner that controls each changed object (see Owners), so a change made
// to an owned object by someone else is put right by its owner's
// reconciler.
func EnqueueOwner[T Owned](q Adder[object.ObjectName], owner schema.GroupKind) Handler[T] {
	return Enqueue(q, Owners[T](owner))
}

// Owners is EnqueueOwner's KeyFunc: the name of the object of kind owner
// that controls the changed object (its owner reference with controller:
// true), looked up in the owned object's namespace (owners of namespaced
// objects live beside them; a cluster-scoped owned object has a
// cluster-scoped owner). An update whose controller changed queues both
// owners; objects without a controller of that kind queue nothing. It
// allocates nothing.
func Owners[T Owned](owner schema.GroupKind) KeyFunc[T, object.ObjectName] {
	return eachState(func(dst []object.ObjectName, obj T) []object.ObjectName {
		if n, ok := ControllerOf(obj, owner); ok && n.Validate() == nil {
			return append(dst, n)
		}
		return dst
	})
}

// ControllerOf returns the name of the object of kind owner that controls
// obj, if any (see Owners for the namespace rule).
func ControllerOf(obj Owned, owner schema.GroupKind) (object.ObjectName, bool) {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller == nil || !*ref.Controller || ref.Kind != owner.Kind {
			continue
		}
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != owner.Group {
			continue
		}
		return object.ObjectName{Namespace: obj.GetNamespace(), Name: ref.Name}, true
	}
	return object.ObjectName{}, false
}
