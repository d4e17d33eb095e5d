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
// reuses ds. Invariant of the result (checkDeltas): at most two deltas, and
// two only as Deleted followed by an upsert.
//
//   - upsert after upsert: one delta of the newest object, with the type of
//     the first (Added stays Added: the object is still new to the cache);
//   - Deleted after upserts: the upserts are dropped, the delete carries the
//     final state;
//   - Deleted after Deleted: the newer delete remains.
func appendDelta[T object.Object](ds []Delta[T], d Delta[T]) []Delta[T] {
	n := len(ds)
	if d.isUpsert() {
		if n > 0 && ds[n-1].isUpsert() {
			ds[n-1].Object = d.Object
			return ds
		}
		return append(ds, d)
	}
	for len(ds) > 0 && (ds[len(ds)-1].isUpsert() || ds[len(ds)-1].Type == Deleted) {
		ds = ds[:len(ds)-1]
	}
	return append(ds, d)
}

// checkDeltas returns an error if ds breaks appendDelta's invariant.
func checkDeltas[T object.Object](ds []Delta[T]) error {
	switch {
	case len(ds) == 0:
		return fmt.Errorf("a queued key has no deltas")
	case len(ds) > 2:
		return fmt.Errorf("%d deltas queued for one key, want at most 2", len(ds))
	case len(ds) == 2 && (ds[0].Type != Deleted || !ds[1].isUpsert()):
		return fmt.Errorf("deltas %v, %v: two deltas must be Deleted then an upsert", ds[0].Type, ds[1].Type)
	}
	for _, d := range ds {
		if d.Type != Added && d.Type != Updated && d.Type != Deleted {
			return fmt.Errorf("unknown delta type %v", d.Type)
		}
	}
	return nil
}
