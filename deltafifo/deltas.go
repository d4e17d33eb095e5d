package deltafifo

import (
	"fmt"

	"github.com/ctrlkit/ctrlkit/object"
)

// DeltaType says what happened to an object.
type DeltaType int

const (
	// Added is a watch ADDED event: the object is new.
	Added DeltaType = iota + 1
	// Updated is a watch MODIFIED event.
	Updated
	// Deleted is a watch DELETED event; the object is the deleted state.
	Deleted
)

// String returns the name of t.
func (t DeltaType) String() string {
	switch t {
	case Added:
		return "Added"
	case Updated:
		return "Updated"
	case Deleted:
		return "Deleted"
	}
	return fmt.Sprintf("DeltaType(%d)", int(t))
}

// Delta is one change of one object.
type Delta[T object.Object] struct {
	Type   DeltaType
	Object T
}

// isUpsert reports an Added or Updated delta: the object exists afterwards.
func (d Delta[T]) isUpsert() bool { return d.Type == Added || d.Type == Updated }

// appendDelta adds d to the deltas queued for one key and compacts them. It
// reuses ds. Invariant of the result (checkDeltas): at most three deltas,
// in the shape Deleted? Added? Updated? (and not empty).
//
//   - Updated after Added: both kept, so that a handler hears the object's
//     add and then its update, as client-go's do (a handler that acts on
//     an update must not miss one because it came before the add was
//     popped);
//   - an upsert after Updated, or Added after Added: one delta of the
//     newest object, with the type of the first;
//   - Deleted after upserts: the upserts are dropped, the delete carries the
//     final state; but if a delete is queued before those upserts (the
//     object was deleted and created again, and the new one deleted too),
//     that first delete remains and the new one is dropped with its
//     upserts: the first is the end of the object the consumer may hold
//     (its UID, its final state), the other object lived only in the queue;
//   - Deleted right after Deleted: the newer remains if it is the same
//     object's (its deletion told twice), the older if the newer is of
//     another object (another UID: one that lived only in the queue).
func appendDelta[T object.Object](ds []Delta[T], d Delta[T]) []Delta[T] {
	n := len(ds)
	if d.isUpsert() {
		if n > 0 && (ds[n-1].Type == Updated || ds[n-1].Type == Added && d.Type == Added) {
			ds[n-1].Object = d.Object
			return ds
		}
		return append(ds, d)
	}
	if n > 0 && ds[n-1].Type == Deleted {
		if !object.Recreated(ds[n-1].Object, d.Object) {
			ds[n-1].Object = d.Object
		}
		return ds
	}
	for len(ds) > 0 && ds[len(ds)-1].isUpsert() {
		ds = ds[:len(ds)-1]
	}
	if len(ds) > 0 { // a Deleted, before the upserts just dropped
		return ds
	}
	return append(ds, d)
}

// checkDeltas returns an error if ds breaks appendDelta's invariant.
func checkDeltas[T object.Object](ds []Delta[T]) error {
	if len(ds) == 0 {
		return fmt.Errorf("a queued key has no deltas")
	}
	next := 0 // the shape's place: 0 Deleted, 1 Added, 2 Updated
	for _, d := range ds {
		var at int
		switch d.Type {
		case Deleted:
			at = 0
		case Added:
			at = 1
		case Updated:
			at = 2
		default:
			return fmt.Errorf("unknown delta type %v", d.Type)
		}
		if at < next {
			return fmt.Errorf("deltas %v: want the shape Deleted? Added? Updated?", types(ds))
		}
		next = at + 1
	}
	return nil
}

// types lists the types of ds, for errors.
func types[T object.Object](ds []Delta[T]) []DeltaType {
	out := make([]DeltaType, len(ds))
	for i, d := range ds {
		out[i] = d.Type
	}
	return out
}
