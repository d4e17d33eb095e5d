package reflector

import (
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/object"
)

// snapshot is a relist gathered whole, for a sink that is not a RelistSink:
// the listed objects, with any MODIFIED and DELETED events of a watch-list
// stream applied, as client-go applies them to its temporary store. It is
// owned by the driver.
//
// Invariant: when at is not nil, at[k] is the index in items of the object
// with key k, for every object of items.
type snapshot[T object.Object] struct {
	items  []T
	at     map[string]int // built at the first MODIFIED or DELETED: a stream of ADDED events alone needs no index
	events int            // events received, the end bookmark excepted
}

// apply applies one ADDED, MODIFIED or DELETED event. A deletion moves the
// last object into the hole: a snapshot has no order.
func (s *snapshot[T]) apply(typ watch.EventType, obj T) {
	s.events++
	if typ == watch.Added && s.at == nil {
		s.items = append(s.items, obj)
		return
	}
	if s.at == nil {
		s.at = make(map[string]int, len(s.items))
		for k, it := range s.items {
			s.at[object.NameOf(it).String()] = k
		}
	}
	key := object.NameOf(obj).String()
	k, ok := s.at[key]
	switch {
	case typ == watch.Deleted && ok:
		last := len(s.items) - 1
		s.items[k] = s.items[last]
		s.at[object.NameOf(s.items[k]).String()] = k
		var zero T
		s.items[last] = zero
		s.items = s.items[:last]
		delete(s.at, key)
	case typ == watch.Deleted: // of an object the stream never added: nothing to remove
	case ok:
		s.items[k] = obj
	default:
		s.at[key] = len(s.items)
		s.items = append(s.items, obj)
	}
}

// take returns the objects and empties s.
func (s *snapshot[T]) take() []T {
	items := s.items
	*s = snapshot[T]{}
	return items
}
