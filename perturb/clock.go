package perturb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Clock is a trial's time (Env.Clock). It runs with real time and jumps
// ahead when the workload advances it (Advance), never back: a controller
// that waits an hour for its next RequeueAfter is run through that hour in
// milliseconds, and through everything it does meanwhile. The trial makes
// one for each trial and keeps it across the controller's crashes and
// restarts and for the fresh controller; its jumps are in the failure's
// writes (Write.Ahead).
//
// The controller under test must take its time from it: its work queue's
// (controller.Options.Clock: RequeueAfter and retry delays) and its own
// reads of the time (Now, Since) where it would call time.Now. In
// production the same code gets the real clock. The API server's time
// (creation and deletion timestamps) stays real: the clock is never
// behind it.
type Clock struct {
	mu     sync.Mutex
	ahead  time.Duration            // how far the clock is ahead of real time
	timers map[*clockTimer]struct{} // armed
	// quiet says how long the controller has made no write; the trial's.
	quiet func() time.Duration
}

// newClock returns a clock at real time whose Advance waits for quiet.
func newClock(quiet func() time.Duration) *Clock {
	return &Clock{timers: map[*clockTimer]struct{}{}, quiet: quiet}
}

// Now returns the clock's time: real time plus every jump so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time { return time.Now().Add(c.ahead) }

// Since returns the clock's time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Ahead returns how far the clock has jumped ahead of real time.
func (c *Clock) Ahead() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ahead
}

// NewTimer returns a timer that fires once the clock has moved d on, by
// real time or by a jump. It is a workqueue.Timer, for the queue.
func (c *Clock) NewTimer(d time.Duration) workqueue.Timer {
	t := &clockTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at, t.armed = c.nowLocked().Add(d), true
	c.timers[t] = struct{}{}
	t.real = time.AfterFunc(d, t.fire)
	return t
}

// clockStep is how long Advance lets the controller be after a jump, and
// how long it must then have made no write, before the next jump.
const clockStep = 100 * time.Millisecond

// Advance moves the clock d on from now, the way time passes for a
// controller that is fast: whenever the controller has made no write for
// a moment (100ms, after the last jump too; half a second after a start
// or restart), the clock jumps to the next
// timer armed on it (the earliest RequeueAfter or retry of the
// controller's queue) if that is before the target, else to the target;
// the timer fires, the controller reconciles, and so on until the target.
// Real time passing counts too. It returns once the clock is at the
// target, or with ctx's error. The workload calls it: "three hours pass".
func (c *Clock) Advance(ctx context.Context, d time.Duration) error {
	target := c.Now().Add(d)
	for {
		if !c.Now().Before(target) {
			return nil
		}
		if err := c.awaitQuiet(ctx); err != nil {
			return fmt.Errorf("perturb: advancing the clock by %s: %w", d, err)
		}
		c.jumpTo(c.nextStop(target))
	}
}

// nextStop is where the clock jumps next on its way to target: the
// earliest timer armed before target, or target.
func (c *Clock) nextStop(target time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, to := c.nowLocked(), target
	for t := range c.timers {
		if t.at.After(now) && t.at.Before(to) {
			to = t.at
		}
	}
	return to
}

// awaitQuiet waits a step, then until the controller has made no write for
// a step.
func (c *Clock) awaitQuiet(ctx context.Context) error {
	wait := clockStep
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		q := clockStep
		if c.quiet != nil {
			q = c.quiet()
		}
		if q >= clockStep {
			return nil
		}
		wait = clockStep - q
	}
}

// jumpTo moves the clock on to to (not back) and fires every timer due
// before it returns.
func (c *Clock) jumpTo(to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowLocked()
	if !to.After(now) {
		return
	}
	c.ahead += to.Sub(now)
	now = c.nowLocked()
	for t := range c.timers {
		if t.at.After(now) {
			t.real.Reset(t.at.Sub(now))
			continue
		}
		t.real.Stop()
		t.sendLocked(now) // fired before the jump returns
	}
}

// clockTimer is a workqueue.Timer on a Clock: a real timer set for the
// time left until at on the clock, set again at each jump.
type clockTimer struct {
	c    *Clock
	ch   chan time.Time
	real *time.Timer
	// Under c.mu:
	at    time.Time // on the clock
	armed bool
}

func (t *clockTimer) C() <-chan time.Time { return t.ch }

// fire sends the clock's time once at has come; a real timer left over
// from before a Reset or Stop finds the timer disarmed or not yet due.
func (t *clockTimer) fire() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	now := t.c.nowLocked()
	if !t.armed {
		return
	}
	if now.Before(t.at) { // not due: a real timer of an earlier setting
		t.real.Reset(t.at.Sub(now))
		return
	}
	t.sendLocked(now)
}

// sendLocked disarms t and sends now on its channel.
func (t *clockTimer) sendLocked(now time.Time) {
	t.armed = false
	delete(t.c.timers, t)
	select {
	case t.ch <- now:
	default:
	}
}

func (t *clockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	delete(t.c.timers, t)
	t.real.Stop()
	t.drain()
	return was
}

func (t *clockTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.drain()
	t.at, t.armed = t.c.nowLocked().Add(d), true
	t.c.timers[t] = struct{}{}
	t.real.Reset(d)
	return was
}

// drain discards a time sent and not received (Stop and Reset do, as
// *time.Timer's since Go 1.23).
func (t *clockTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}
