package object

import (
	"errors"
	"fmt"
)

// ErrNoKey reports a tombstone that has neither a name nor an object to
// compute one from.
var ErrNoKey = errors.New("object: tombstone has no name and no object")

// Deleted is the typed tombstone handed to delete handlers: the object
// called Name is gone. It replaces client-go's interface{} that is either the object
// or a DeletedFinalStateUnknown.
//
// Obj is the last state the cache knew, possibly stale: when
// FinalStateUnknown is true the deletion was inferred from a relist, so
// changes between the last event seen and the deletion were missed. HasObj is
// false when no state was known at all; Obj is then the zero value.
type Deleted[T Object] struct {
	// Name is the name of the cache entry that was deleted (the cache's key,
	// typed); it may be zero when the producer only had the object (see
	// DeletionHandlingMetaNamespaceKeyFunc).
	Name ObjectName
	// Obj is the last known state of the object, valid when HasObj is true.
	// It is shared with the cache: read it, never modify it.
	Obj T
	// HasObj reports whether Obj holds an object.
	HasObj bool
	// FinalStateUnknown reports that the deletion was observed by a relist,
	// not by a watch event, so Obj may be older than the deleted object.
	FinalStateUnknown bool
}

// DeletionHandlingMetaNamespaceKeyFunc returns the store key of a tombstone:
// d.Name's when set (it names the entry that was deleted, even if the object
// was stale), otherwise MetaNamespaceKeyFunc of d.Obj. A tombstone with
// neither returns an error wrapping ErrNoKey.
func DeletionHandlingMetaNamespaceKeyFunc[T Object](d Deleted[T]) (string, error) {
	if d.Name != (ObjectName{}) {
		return d.Name.String(), nil
	}
	if !d.HasObj {
		return "", ErrNoKey
	}
	key, err := MetaNamespaceKeyFunc(d.Obj)
	if err != nil {
		return "", fmt.Errorf("tombstone: %w", err)
	}
	return key, nil
}
