package workqueue

// fifo is a slice-backed FIFO that reuses its array: pop advances head, and
// the live part is moved to the front once half the array is dead.
type fifo[T any] struct {
	buf  []T
	head int
}

func (f *fifo[T]) len() int { return len(f.buf) - f.head }

func (f *fifo[T]) push(v T) {
	if f.head > 0 && f.head >= len(f.buf)/2 && len(f.buf) == cap(f.buf) {
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, v)
}

// pop removes and returns the front; the fifo must not be empty.
func (f *fifo[T]) pop() T {
	var zero T
	v := f.buf[f.head]
	f.buf[f.head] = zero // let the garbage collector have what v points to
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return v
}

// front returns the front without removing it; the fifo must not be empty.
func (f *fifo[T]) front() T { return f.buf[f.head] }

// at returns the i-th live value, front first, for updating in place.
func (f *fifo[T]) at(i int) *T { return &f.buf[f.head+i] }

// reset empties the fifo, keeping its array.
func (f *fifo[T]) reset() {
	clear(f.buf)
	f.buf, f.head = f.buf[:0], 0
}

// items returns the live part, oldest first. The caller must not keep it.
func (f *fifo[T]) items() []T { return f.buf[f.head:] }
