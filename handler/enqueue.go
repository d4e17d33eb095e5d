package handler

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// EnqueueObject returns a Handler that adds the typed name of every changed
// object to q, so a reconciler gets an object.ObjectName and never splits a
// string. A tombstone is named by its key when it has one (the entry that
// was deleted), otherwise by its object. If q is a PriorityAdder, the
// initial list and resyncs are queued at workqueue.LowPriority (as by every helper of
// this file).
func EnqueueObject[T object.Object](q Adder[object.ObjectName]) Handler[T] {
	return &enqueueMapped[T]{q: newAdder(q), byKey: true,
		fn: func(obj T) []object.ObjectName { return []object.ObjectName{object.NameOf(obj)} }}
}

// EnqueueMapped returns a Handler that adds, for every changed object, the
// names fn maps it to: "which objects of my kind care about this one". An
// update maps both the old and the new object, so a reference that moved
// queues both ends; a delete maps the last known object (a tombstone without
// one maps nothing). fn runs on the handler's goroutine and must not block.
func EnqueueMapped[T object.Object](q Adder[object.ObjectName], fn func(obj T) []object.ObjectName) Handler[T] {
	return &enqueueMapped[T]{q: newAdder(q), fn: fn}
}

type enqueueMapped[T object.Object] struct {
	q     adder[object.ObjectName]
	fn    func(T) []object.ObjectName
	byKey bool // a tombstone's key names the object to queue (EnqueueObject)
}

func (e *enqueueMapped[T]) OnAdd(obj T, isInInitialList bool) { e.add(obj, isInInitialList) }

func (e *enqueueMapped[T]) OnUpdate(old, new T) {
	if isResync(old, new) { // one object: map it once
		e.add(new, true)
		return
	}
	e.add(old, false)
	e.add(new, false)
}

func (e *enqueueMapped[T]) OnDelete(d object.Deleted[T]) {
	if e.byKey && d.Name.Validate() == nil {
		e.q.add(d.Name, false)
		return
	}
	if d.HasObj {
		e.add(d.Obj, false)
	}
}

func (e *enqueueMapped[T]) add(obj T, background bool) {
	for _, n := range e.fn(obj) {
		if n.Validate() == nil {
			e.q.add(n, background)
		}
	}
}

// Owned is an object with owner references, as every Kubernetes API type.
type Owned interface {
	object.Object
	GetOwnerReferences() []metav1.OwnerReference
}

// EnqueueOwner returns a Handler that adds the name of the object of kind
// owner that controls each changed object (its owner reference with
// controller: true), so a change made to an owned object by someone else
// is put right by its owner's reconciler. The owner is looked up in the
// owned object's namespace (owners of namespaced objects live beside them;
// a cluster-scoped owned object has a cluster-scoped owner). An ownership
// change queues both owners; objects without a controller of that kind are
// ignored.
func EnqueueOwner[T Owned](q Adder[object.ObjectName], owner schema.GroupKind) Handler[T] {
	return EnqueueMapped(q, func(obj T) []object.ObjectName {
		if n, ok := ControllerOf(obj, owner); ok {
			return []object.ObjectName{n}
		}
		return nil
	})
}

// ControllerOf returns the name of the object of kind owner that controls
// obj, if any (see EnqueueOwner for the namespace rule).
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
