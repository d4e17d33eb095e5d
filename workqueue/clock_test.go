package workqueue

import (
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// fakeClock is a Clock whose time moves only when the test calls step. Its
// timers behave like Go 1.23+ timers: Stop and Reset discard a value that
// was sent but not received.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	created int // NewTimer calls
	resets  int // Reset calls
	nows    int // Now calls
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nows++
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.created++
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	t.setLocked(d)
	return t
}

// step moves the time forward by d and fires the timers that are due.
func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireIfDueLocked()
	}
}

// armed returns the number of timers that will fire in the future.
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.active {
			n++
		}
	}
	return n
}

// nowCalls returns how many times Now was called.
func (c *fakeClock) nowCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nows
}

// calls returns how many timers were created and reset so far.
func (c *fakeClock) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created + c.resets
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	at     time.Time
	active bool // guarded by c.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	t.drainLocked()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.resets++
	was := t.active
	t.drainLocked()
	t.setLocked(d)
	return was
}

func (t *fakeTimer) setLocked(d time.Duration) {
	t.at, t.active = t.c.now.Add(d), true
	t.fireIfDueLocked()
}

func (t *fakeTimer) fireIfDueLocked() {
	if t.active && !t.at.After(t.c.now) {
		t.active = false
		t.ch <- t.c.now // buffer 1, drained before every re-arm
	}
}

func (t *fakeTimer) drainLocked() {
	select {
	case <-t.ch:
	default:
	}
}

// ClockOf's timers drop a time sent but not received when stopped or
// reset, as *time.Timer's do, though the fake clock's timers keep it: the
// queue's delay goroutine never reads a stale firing.
func TestClockOf_timersDropATimeSentButNotReceived(t *testing.T) {
	fake := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := ClockOf(fake.Now, fake.NewTimer)
	timer := c.NewTimer(time.Second)
	fake.Step(time.Second) // fired: a time waits in its channel
	if timer.Stop() {
		t.Error("Stop after the timer fired reported it stopped it")
	}
	select {
	case at := <-timer.C():
		t.Fatalf("a stopped timer's channel held %v", at)
	default:
	}
	fake.Step(time.Second)
	timer.Reset(time.Second) // fired again meanwhile? no: stopped; armed anew for a second from now
	fake.Step(500 * time.Millisecond)
	select {
	case at := <-timer.C():
		t.Fatalf("the timer reset for a second fired after half of it, at %v", at)
	default:
	}
	fake.Step(500 * time.Millisecond)
	select {
	case <-timer.C():
	default:
		t.Fatal("the reset timer did not fire when its second was up")
	}
	if c.Now() != fake.Now() {
		t.Errorf("Now = %v, want the fake's %v", c.Now(), fake.Now())
	}
}
