package handler

import "github.com/ctrlkit/ctrlkit/object"

// Filtering passes to Handler only the objects Filter accepts, and turns
// crossings of the filter into the events the inner handler expects: an
// update whose object leaves the filter is a delete carrying the last state
// Handler accepted (the old object: a cleanup keyed on what made it pass,
// say a label, needs that state), and one whose object enters it is an add.
// Filter must depend only on the object; it runs on the handler's
// goroutine.
type Filtering[T object.Object] struct {
	Filter  func(obj T) bool
	Handler Handler[T]
}

// OnAdd forwards obj if it passes the filter.
func (f Filtering[T]) OnAdd(obj T, isInInitialList bool) {
	if f.Filter(obj) {
		f.Handler.OnAdd(obj, isInInitialList)
	}
}

// OnUpdate forwards an update inside the filter, an add of new when new
// enters it and a delete of old when new leaves it.
func (f Filtering[T]) OnUpdate(old, new T) {
	was, is := f.Filter(old), f.Filter(new)
	switch {
	case was && is:
		f.Handler.OnUpdate(old, new)
	case is:
		f.Handler.OnAdd(new, false)
	case was:
		f.Handler.OnDelete(object.Deleted[T]{Name: object.NameOf(old), Obj: old, HasObj: true})
	}
}

// OnDelete forwards d if its object passed the filter. A tombstone without
// an object is forwarded: the filter cannot tell, and a delete of an
// unknown key is harmless where a missed delete is not.
func (f Filtering[T]) OnDelete(d object.Deleted[T]) {
	if !d.HasObj || f.Filter(d.Obj) {
		f.Handler.OnDelete(d)
	}
}
