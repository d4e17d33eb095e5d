package handler

import "github.com/ctrlkit/ctrlkit/object"

// Filtering passes to Handler only the objects Filter accepts, and turns
// crossings of the filter into the events the inner handler expects: an
// update whose object leaves the filter is a delete carrying the last state
// Handler accepted (the old object: a cleanup keyed on what made it pass,
// say a label, needs that state), and one whose object enters it is an add
// (see Event.Filtered). Filter must depend only on the object; it runs on
// the handler's goroutine. Filtering is a plain Handler, called event by
// event from a goroutine of its own: a manager's sources take their
// filters on the informer's batched path instead.
type Filtering[T object.Object] struct {
	Filter  func(obj T) bool
	Handler Handler[T]
}

// OnAdd forwards obj if it passes the filter.
func (f Filtering[T]) OnAdd(obj T, isInInitialList bool) {
	f.pass(Event[T]{Type: AddEvent, Obj: obj, Initial: isInInitialList})
}

// OnUpdate forwards an update inside the filter, an add of new when new
// enters it and a delete of old when new leaves it.
func (f Filtering[T]) OnUpdate(old, new T) {
	f.pass(Event[T]{Type: UpdateEvent, Old: old, Obj: new})
}

// OnDelete forwards d if its object passed the filter, or it has none.
func (f Filtering[T]) OnDelete(d object.Deleted[T]) {
	f.pass(Event[T]{Type: DeleteEvent, Deleted: d})
}

func (f Filtering[T]) pass(e Event[T]) {
	if e, ok := e.Filtered(f.Filter); ok {
		e.Deliver(f.Handler)
	}
}
