package informer

import (
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
)

// notification is one call to make on a handler, with its key: the
// handler package's Event, which an Enqueuer is given as it is.
type notification[T object.Object] = handler.Event[T]

// merge adds n to the notifications pending for one key of one handler and
// coalesces them, so a handler's backlog holds at most two per key: an
// optional delete followed by an optional add or update. It reuses p.
//
//   - add then update or add: one add of the newest object (still initial
//     if the first was);
//   - update then update: one update from the oldest old to the newest;
//   - add then delete: nothing, the handler never saw the object;
//   - update then delete: the delete;
//   - delete then delete: the first delete, the one the handler's state
//     refers to;
//   - delete then add: both, in order (a re-creation).
func merge[T object.Object](p []notification[T], n notification[T]) []notification[T] {
	last := len(p) - 1
	if n.Type != handler.DeleteEvent {
		if last < 0 || p[last].Type == handler.DeleteEvent {
			return append(p, n)
		}
		p[last].Obj = n.Obj // an add stays an add; an update keeps its old
		p[last].Resync = p[last].Resync && n.Resync
		return p
	}
	if last >= 0 && p[last].Type == handler.AddEvent {
		return p[:last]
	}
	if last >= 0 && p[last].Type == handler.UpdateEvent {
		p, last = p[:last], last-1
	}
	if last >= 0 { // a delete is already pending
		return p
	}
	return append(p, n)
}

// compact coalesces p, notifications of one key as they came, into the
// at most two merge keeps, reusing p.
func compact[T object.Object](p []notification[T]) []notification[T] {
	q := p[:0]
	for _, n := range p {
		q = merge(q, n) // q never grows past the element read
	}
	clear(p[len(q):]) // hold no object the handler will not hear of
	return q
}

// countInitial returns how many of p are initial-list adds.
func countInitial[T object.Object](p []notification[T]) int {
	n := 0
	for _, x := range p {
		if x.Type == handler.AddEvent && x.Initial {
			n++
		}
	}
	return n
}
