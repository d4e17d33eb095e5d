package perturb

import (
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// quietAlways is a controller that never writes.
func quietAlways() time.Duration { return time.Hour }

// Advance jumps the clock to each timer armed before its target in turn,
// firing it, and stops at the target; a timer after the target stays
// armed; the clock never goes back.
func TestClock_advanceFiresEveryTimerOnTheWayAndStopsAtTheTarget(t *testing.T) {
	c := newClock(quietAlways)
	start := c.Now()
	early, late, after := c.NewTimer(time.Hour), c.NewTimer(2*time.Hour), c.NewTimer(5*time.Hour)
	if err := c.Advance(t.Context(), 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	for name, tm := range map[string]workqueue.Timer{"1h": early, "2h": late} {
		select {
		case at := <-tm.C():
			if at.Before(start) {
				t.Errorf("the %s timer sent %s, before the start %s", name, at, start)
			}
		default:
			t.Errorf("the %s timer has not fired after the clock moved 3h on", name)
		}
	}
	select {
	case <-after.C():
		t.Error("the 5h timer fired after 3h")
	default:
	}
	if got := c.Since(start); got < 3*time.Hour || got > 3*time.Hour+time.Minute {
		t.Errorf("the clock moved %s, want 3h (and the real time the jumps took)", got)
	}
	if ahead := c.Ahead(); ahead < 3*time.Hour-time.Minute || ahead > 3*time.Hour {
		t.Errorf("Ahead %s, want about 3h", ahead)
	}
	if !after.Stop() {
		t.Error("Stop of the 5h timer: want true (it was armed)")
	}
	if early.Stop() {
		t.Error("Stop of the fired 1h timer: want false")
	}
	c.mu.Lock()
	armed := len(c.timers)
	c.mu.Unlock()
	if armed != 0 {
		t.Errorf("%d timers still armed, want none", armed)
	}
}

// Advance waits for the controller to be quiet before each jump: while it
// writes, the clock moves with real time only.
func TestClock_advanceWaitsForAQuietController(t *testing.T) {
	quiet := make(chan time.Duration, 1)
	quiet <- 0 // the first look finds the controller busy
	c := newClock(func() time.Duration {
		select {
		case q := <-quiet:
			return q
		default:
			return time.Hour
		}
	})
	if err := c.Advance(t.Context(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if len(quiet) != 0 {
		t.Fatal("Advance jumped without asking whether the controller was quiet")
	}
}

// Stop and Reset discard a time sent and not received, and Reset arms the
// timer anew on the clock's time.
func TestClock_stopAndResetDiscardAFiredTime(t *testing.T) {
	c := newClock(quietAlways)
	tm := c.NewTimer(time.Hour)
	if err := c.Advance(t.Context(), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if tm.Reset(time.Hour) {
		t.Error("Reset of a fired timer: want false")
	}
	select {
	case <-tm.C():
		t.Error("a time sent before Reset was still there after it")
	default:
	}
	if err := c.Advance(t.Context(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := <-tm.C(); c.Now().Before(got) {
		t.Errorf("sent %s, after the clock's now", got)
	}
}

// The work queue's delays run on the clock: a key added an hour ahead is
// handed out once the clock has moved an hour on, not an hour later.
func TestClock_drivesTheWorkQueuesDelays(t *testing.T) {
	c := newClock(quietAlways)
	q, err := workqueue.New(workqueue.Options[string]{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	q.AddAfter("tick", time.Hour)
	if q.Len() != 0 {
		t.Fatalf("Len %d before the hour passed, want 0", q.Len())
	}
	if err := c.Advance(t.Context(), time.Hour); err != nil {
		t.Fatal(err)
	}
	key, shutdown := q.Get()
	if shutdown || key != "tick" {
		t.Fatalf("Get: %q, %v; want tick", key, shutdown)
	}
	q.Done(key)
}
