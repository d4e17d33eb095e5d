package deltafifo

import (
	"fmt"
	"slices"

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
// reuses ds. The deltas are the lives of the objects the key named while it
// was queued, in order: each life is Added? (Updated | Deleted)?, and every
// life but the last ends with its Deleted. Invariant of the result
// (checkDeltas): not empty, at most two lives, so at most four deltas.
//
//   - Updated after Added: both kept, so that a handler hears the object's
//     add and then its update, as client-go's do (a handler that acts on
//     an update must not miss one because it came before the add was
//     popped);
//   - an upsert after Updated, or Added after Added: one delta of the
//     newest object, with the type of the first;
//   - Deleted after upserts: the Updated is dropped, the delete carries the
//     final state; an Added stays, so that an object created and deleted
//     while its key was queued is told as an add then a delete, as
//     client-go tells it (an expectation counting the creates a controller
//     made, or a read-your-writes hold, hears of it);
//   - an upsert after Deleted begins a new life; of three or more lives
//     the first is kept (the end of the object the consumer may hold, or
//     the first that lived only in the queue) and the last, and those
//     between, which lived only in the queue and are over, are dropped:
//     memory stays bounded under a burst of re-creations;
//   - Deleted right after Deleted: the newer remains if it is the same
//     object's (its deletion told twice), the older if the newer is of
//     another object (another UID: one whose add was never queued);
//   - Deleted after an Updated that began a life (a stream that updated an
//     object after deleting it): the life goes, the delete before it stays.
func appendDelta[T object.Object](ds []Delta[T], d Delta[T]) []Delta[T] {
	n := len(ds)
	if n > 0 && ds[n-1].Type != Deleted { // the last life goes on
		last := &ds[n-1]
		if d.isUpsert() {
			if last.Type == Updated || last.Type == Added && d.Type == Added {
				last.Object = d.Object
				return ds
			}
			return append(ds, d)
		}
		if last.Type == Updated {
			ds, n = ds[:n-1], n-1
		}
		switch {
		case n > 0 && ds[n-1].Type == Added: // it began in the queue: told whole
			return append(ds, d)
		case n > 0: // a life that began with an update after a delete
			return ds
		}
		return append(ds, d)
	}
	if n == 0 {
		return append(ds, d)
	}
	if d.Type == Deleted {
		if !object.Recreated(ds[n-1].Object, d.Object) {
			ds[n-1].Object = d.Object
		}
		return ds
	}
	if first := slices.IndexFunc(ds, Delta[T].isDelete); first < n-1 { // two lives over: drop the second
		clear(ds[first+1:])
		ds = ds[:first+1]
	}
	return append(ds, d)
}

// isDelete reports a Deleted delta.
func (d Delta[T]) isDelete() bool { return d.Type == Deleted }

// checkDeltas returns an error if ds breaks appendDelta's invariant.
func checkDeltas[T object.Object](ds []Delta[T]) error {
	if len(ds) == 0 {
		return fmt.Errorf("a queued key has no deltas")
	}
	lives, at := 1, 0 // at: the place in the life's shape, 0 Added, 1 Updated or Deleted, 2 ended
	for i, d := range ds {
		if at == 2 { // the life before ended with its delete
			lives, at = lives+1, 0
		}
		switch {
		case d.Type == Added && at == 0:
			at = 1
		case d.Type == Updated && at <= 1:
			at = 2
			if i != len(ds)-1 {
				return fmt.Errorf("deltas %v: an update must end the last life", types(ds))
			}
		case d.Type == Deleted:
			at = 2
		default:
			return fmt.Errorf("deltas %v: want at most two lives of the shape Added? (Updated | Deleted)?", types(ds))
		}
	}
	if lives > 2 {
		return fmt.Errorf("deltas %v: %d lives, want at most two", types(ds), lives)
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
