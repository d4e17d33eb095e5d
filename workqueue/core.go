package workqueue

import (
	"fmt"
	"time"
)

// core is the queue's bookkeeping with no lock, no clock and no goroutine:
// which keys wait, in which order, and which are being processed. Queue wraps
// it with a mutex and passes the time in when it measures durations.
//
// A key is in one of four states:
//
//	idle        in neither set
//	queued      in dirty and in order, not in processing
//	processing  in processing, not in dirty
//	re-added    in processing and in dirty, not in order (queued again at done)
//
// Invariants (checked by checkInvariants):
//   - order holds no key twice, and every key in order is in dirty and not in
//     processing;
//   - every key in dirty is either in order or in processing, never both;
//   - when stamps is set, its maps have exactly the keys of dirty and of
//     processing.
type core[K comparable] struct {
	// order is the FIFO of keys ready to be handed out.
	order fifo[K]
	// dirty holds the keys that need processing.
	dirty map[K]struct{}
	// processing holds the keys handed out by get and not yet done.
	processing map[K]struct{}
	// stamps records times for the metrics; nil when metrics are off, so
	// the hot path then touches two small sets and nothing else.
	stamps *stamps[K]
}

// stamps are the times core keeps for metrics.
type stamps[K comparable] struct {
	dirtied map[K]time.Time // when each dirty key became dirty
	started map[K]time.Time // when each processing key was handed out
}

// newCore returns an empty core; with timed set it keeps stamps.
func newCore[K comparable](timed bool) core[K] {
	c := core[K]{dirty: map[K]struct{}{}, processing: map[K]struct{}{}}
	if timed {
		c.stamps = &stamps[K]{dirtied: map[K]time.Time{}, started: map[K]time.Time{}}
	}
	return c
}

// add marks k as needing processing. It reports whether k became dirty (it
// was not already waiting) and whether it went into order (it is not being
// processed), which is when a waiting worker should be woken.
func (c *core[K]) add(k K, now time.Time) (dirtied, queued bool) {
	if _, ok := c.dirty[k]; ok {
		return false, false
	}
	c.dirty[k] = struct{}{}
	if c.stamps != nil {
		c.stamps.dirtied[k] = now
	}
	if _, ok := c.processing[k]; ok {
		return true, false
	}
	c.order.push(k)
	return true, true
}

// get hands out the oldest queued key and moves it to processing. It returns
// when the key became dirty (zero without stamps) and ok=false when nothing
// is queued.
func (c *core[K]) get(now time.Time) (k K, since time.Time, ok bool) {
	if c.order.len() == 0 {
		return k, since, false
	}
	k = c.order.pop()
	delete(c.dirty, k)
	c.processing[k] = struct{}{}
	if c.stamps != nil {
		since = c.stamps.dirtied[k]
		delete(c.stamps.dirtied, k)
		c.stamps.started[k] = now
	}
	return k, since, true
}

// done ends the processing of k. A key that was re-added meanwhile goes back
// into order (requeued). ok is false, and nothing changes, when k was not
// being processed. started is when get handed k out (zero without stamps).
func (c *core[K]) done(k K) (started time.Time, requeued, ok bool) {
	n := len(c.processing)
	delete(c.processing, k)
	if len(c.processing) == n {
		return started, false, false
	}
	if c.stamps != nil {
		started = c.stamps.started[k]
		delete(c.stamps.started, k)
	}
	if _, ok := c.dirty[k]; ok {
		c.order.push(k)
		return started, true, true
	}
	return started, false, true
}

// queued is the number of keys get can hand out.
func (c *core[K]) queued() int { return c.order.len() }

// idle reports whether nothing is queued, re-added or being processed.
func (c *core[K]) idle() bool { return len(c.dirty) == 0 && len(c.processing) == 0 }

// checkInvariants returns an error describing the first broken invariant.
func (c *core[K]) checkInvariants() error {
	seen := make(map[K]bool, c.order.len())
	for _, k := range c.order.items() {
		if seen[k] {
			return fmt.Errorf("workqueue: key %v is in order twice", k)
		}
		seen[k] = true
		if _, ok := c.dirty[k]; !ok {
			return fmt.Errorf("workqueue: queued key %v is not dirty", k)
		}
		if _, ok := c.processing[k]; ok {
			return fmt.Errorf("workqueue: queued key %v is also processing", k)
		}
	}
	for k := range c.dirty {
		_, proc := c.processing[k]
		if seen[k] == proc {
			return fmt.Errorf("workqueue: dirty key %v: in order %v, processing %v", k, seen[k], proc)
		}
	}
	return c.checkStamps()
}

// checkStamps checks that stamps has exactly the keys of dirty and processing.
func (c *core[K]) checkStamps() error {
	if c.stamps == nil {
		return nil
	}
	if !sameKeys(c.stamps.dirtied, c.dirty) || !sameKeys(c.stamps.started, c.processing) {
		return fmt.Errorf("workqueue: stamps cover %d dirty and %d processing keys, want %d and %d",
			len(c.stamps.dirtied), len(c.stamps.started), len(c.dirty), len(c.processing))
	}
	return nil
}

func sameKeys[K comparable](times map[K]time.Time, set map[K]struct{}) bool {
	if len(times) != len(set) {
		return false
	}
	for k := range set {
		if _, ok := times[k]; !ok {
			return false
		}
	}
	return true
}

// fifo is a slice-backed FIFO that reuses its array: pop advances head, and
// the live part is moved to the front once half the array is dead.
type fifo[K comparable] struct {
	buf  []K
	head int
}

func (f *fifo[K]) len() int { return len(f.buf) - f.head }

func (f *fifo[K]) push(k K) {
	if f.head > 0 && f.head >= len(f.buf)/2 && len(f.buf) == cap(f.buf) {
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, k)
}

func (f *fifo[K]) pop() K {
	var zero K
	k := f.buf[f.head]
	f.buf[f.head] = zero // let the garbage collector have what k points to
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return k
}

// items returns the live part, oldest first. The caller must not keep it.
func (f *fifo[K]) items() []K { return f.buf[f.head:] }
