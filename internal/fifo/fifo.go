// Package fifo is the slice-backed first-in, first-out queue the pipeline's
// stages keep their orders in (the DeltaFIFO's keys, an informer handler's
// pending keys, the work queue's bands and flows).
package fifo

// Queue is a FIFO over a slice that reuses its array: Pop advances a head,
// and the live part moves to the front once half the array is dead, so a
// steady stream of pushes and pops allocates nothing. The zero value is an
// empty queue. Not safe for concurrent use.
type Queue[T any] struct {
	buf  []T
	head int
}

// Len returns the number of values queued.
func (q *Queue[T]) Len() int { return len(q.buf) - q.head }

// Cap returns the number of values the array holds room for.
func (q *Queue[T]) Cap() int { return cap(q.buf) }

// Push adds v at the back. A full array is compacted in place when at
// least half of it is popped, else replaced by one twice the live part's
// size (append grows a large array by a quarter: a backlog building up
// would allocate about five times its final size on the way, twice with
// doubling).
func (q *Queue[T]) Push(v T) {
	if len(q.buf) == cap(q.buf) {
		live := q.buf[q.head:]
		switch {
		case q.head > 0 && q.head >= len(q.buf)/2:
			n := copy(q.buf, live)
			clear(q.buf[n:])
			q.buf, q.head = q.buf[:n], 0
		case len(q.buf) > 0:
			grown := make([]T, len(live), max(2*len(live), minGrow))
			copy(grown, live)
			q.buf, q.head = grown, 0
		}
	}
	q.buf = append(q.buf, v)
}

// minGrow is the smallest array Push replaces a full one with.
const minGrow = 8

// Pop removes and returns the front; the queue must not be empty.
func (q *Queue[T]) Pop() T {
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero // let the garbage collector have what v points to
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	return v
}

// Front returns the front without removing it; the queue must not be empty.
func (q *Queue[T]) Front() T { return q.buf[q.head] }

// At returns the i-th value, front first, for updating in place.
func (q *Queue[T]) At(i int) *T { return &q.buf[q.head+i] }

// Reset empties the queue, keeping its array.
func (q *Queue[T]) Reset() {
	clear(q.buf)
	q.buf, q.head = q.buf[:0], 0
}

// Items returns the values queued, front first. The caller must not keep
// the slice past the next Push, Pop or Reset.
func (q *Queue[T]) Items() []T { return q.buf[q.head:] }
