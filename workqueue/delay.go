package workqueue

import (
	"sync"
	"time"
)

// delayer turns AddAfter calls into Adds when their time comes.
//
// Ownership: one goroutine, loop, owns the heap and the timer. It is started
// by the first AddAfter that needs it (never by the constructor) and stopped
// and joined by stop, which Queue.ShutDown and Queue.ShutDownWithDrain call.
// A queue that never delays a key never starts a goroutine.
//
// Callers never block on the goroutine: AddAfter appends to intake, an
// unbounded slice guarded by mu, and pokes wake (buffer 1, non-blocking send).
// The goroutine swaps intake out under mu and works on its own copy.
type delayer[K comparable] struct {
	clock Clock
	add   func(K, int32) // Queue.add; called by loop with no lock held

	wake chan struct{} // buffer 1: "intake is not empty"
	quit chan struct{} // closed by stop
	wg   sync.WaitGroup

	// mu guards intake, started and stopped. Invariant: the goroutine runs
	// only if started; once stopped, intake is empty and stays empty.
	mu      sync.Mutex
	intake  []waiting[K]
	started bool
	stopped bool
}

func newDelayer[K comparable](clock Clock, add func(K, int32)) *delayer[K] {
	return &delayer[K]{
		clock: clock,
		add:   add,
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
	}
}

// after schedules k for at, at priority prio. It is ignored once stop has
// been called. It never blocks on the delay goroutine.
func (d *delayer[K]) after(k K, prio int32, at time.Time) {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.intake = append(d.intake, waiting[K]{key: k, at: at, prio: prio})
	if !d.started {
		d.started = true
		d.wg.Go(d.loop)
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// stop ends the goroutine, if any, drops every key still waiting and returns
// once the goroutine has exited. Safe to call more than once.
func (d *delayer[K]) stop() {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		d.intake = nil
		close(d.quit)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// take returns everything in intake and empties it.
func (d *delayer[K]) take(buf []waiting[K]) []waiting[K] {
	d.mu.Lock()
	defer d.mu.Unlock()
	in := d.intake
	d.intake = buf[:0]
	return in
}

// loopState is what the delay goroutine owns; nothing else touches it.
type loopState[K comparable] struct {
	heap  delayHeap[K]
	timer Timer        // nil until the first key must wait
	armed time.Time    // when timer fires; zero while disarmed
	spare []waiting[K] // the intake slice to hand back, reused
	ready []waiting[K] // keys popped from heap, reused
}

// loop is the delay goroutine. The timer is armed only while the heap holds
// a key, and always for the earliest one, so an idle queue does not tick.
func (d *delayer[K]) loop() {
	s := &loopState[K]{heap: newDelayHeap[K]()}
	defer func() {
		if s.timer != nil {
			s.timer.Stop()
		}
	}()
	for {
		d.step(s)
		var timerC <-chan time.Time
		if !s.armed.IsZero() {
			timerC = s.timer.C()
		}
		select {
		case <-d.wake:
		case <-timerC:
			s.armed = time.Time{}
		case <-d.quit:
			return
		}
	}
}

// step moves new keys into the heap, adds the ready ones to the queue and
// re-arms the timer for the earliest key left.
func (d *delayer[K]) step(s *loopState[K]) {
	in := d.take(s.spare)
	for _, w := range in {
		s.heap.add(w)
	}
	clear(in)
	s.spare = in
	s.ready = s.heap.popReady(d.clock.Now(), s.ready[:0])
	for _, w := range s.ready {
		d.add(w.key, w.prio)
	}
	clear(s.ready)
	d.arm(s)
}

// arm points the timer at the heap's earliest key, or disarms it when the
// heap is empty. A timer already set for that time is left alone.
func (d *delayer[K]) arm(s *loopState[K]) {
	at, ok := s.heap.next()
	switch {
	case !ok:
		if !s.armed.IsZero() {
			s.timer.Stop()
			s.armed = time.Time{}
		}
	case at.Equal(s.armed):
	case s.timer == nil:
		s.timer = d.clock.NewTimer(at.Sub(d.clock.Now()))
		s.armed = at
	default:
		s.timer.Reset(at.Sub(d.clock.Now()))
		s.armed = at
	}
}

// Clock is the queue's source of time: when delayed keys become ready, how
// long a key waited, how long a worker held it. The default is the system
// clock. Tests inject a fake: ClockOf adapts one of k8s.io/utils/clock's
// (its testing.FakeClock, as client-go's and controller-runtime's tests
// use), and package perturb's trials give theirs; a test inside a
// testing/synctest bubble needs none.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the queue uses. Like *time.Timer since
// Go 1.23, Stop and Reset should discard a time sent but not yet received.
type Timer interface {
	// C returns the channel the timer fires on.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer before it fired.
	Stop() bool
	// Reset makes the timer fire once d has passed from now, whether or
	// not it had fired or been stopped.
	Reset(d time.Duration) bool
}

// realClock is the system clock. Its times are its start plus the time
// since, which reads only the monotonic clock where time.Now reads the
// wall clock too: a queue with metrics reads the time three times a key.
// Their wall-clock part does not follow a step of the system's clock after
// the start (the durations, timers and ages it is used for never did).
type realClock struct{ start time.Time }

func newRealClock() realClock { return realClock{start: time.Now()} }

func (c realClock) Now() time.Time { return c.start.Add(time.Since(c.start)) }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// realTimer adapts *time.Timer to Timer.
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// ClockOf makes a Clock of a clock's Now and NewTimer: those of
// k8s.io/utils/clock's clocks (clock.RealClock, testing.FakeClock), whose
// NewTimer returns a clock.Timer, or of any clock whose timers have C,
// Stop and Reset:
//
//	fake := clocktesting.NewFakeClock(time.Now())
//	q, err := workqueue.New(workqueue.Options[string]{Clock: workqueue.ClockOf(fake.Now, fake.NewTimer)})
//
// Its timers' Stop and Reset drop a time sent but not received, as
// *time.Timer's do since Go 1.23 (a fake clock's timer may keep it).
func ClockOf[T Timer](now func() time.Time, newTimer func(time.Duration) T) Clock {
	return clockOf[T]{now: now, newTimer: newTimer}
}

type clockOf[T Timer] struct {
	now      func() time.Time
	newTimer func(time.Duration) T
}

func (c clockOf[T]) Now() time.Time                 { return c.now() }
func (c clockOf[T]) NewTimer(d time.Duration) Timer { return drainingTimer{c.newTimer(d)} }

// drainingTimer is a Timer whose Stop and Reset drop a time sent but not
// yet received.
type drainingTimer struct{ Timer }

func (t drainingTimer) Stop() bool {
	stopped := t.Timer.Stop()
	select {
	case <-t.C():
	default:
	}
	return stopped
}

func (t drainingTimer) Reset(d time.Duration) bool {
	stopped := t.Stop()
	t.Timer.Reset(d)
	return stopped
}
