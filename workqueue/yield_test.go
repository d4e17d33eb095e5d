package workqueue

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Get yields its processor only while the workers are saturated (no Get is
// waiting for a key and none stopped waiting in the last yieldAfter), and at
// most once every yieldEvery.
func TestQueue_GetYieldsOnlyWhileTheWorkersAreSaturated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		var yields atomic.Int32
		q.yield = func() { yields.Add(1) }
		q.yielded = &oneClock{} // the test's Gets share one processor's clock
		check := func(when string, saturated bool, wantYields int32) {
			t.Helper()
			if got := q.saturated(time.Since(q.born)); got != saturated {
				t.Fatalf("%s: saturated() = %v, want %v", when, got, saturated)
			}
			if got := yields.Load(); got != wantYields {
				t.Fatalf("%s: Get yielded %d times in all, want %d", when, got, wantYields)
			}
		}
		getNow := func(want string) { // a Get that finds want queued
			t.Helper()
			q.Add(want)
			if k, _ := q.Get(); k != want {
				t.Fatalf("Get() = %q, want %q", k, want)
			}
			q.Done(want)
		}
		waiting := func() <-chan string { // a Get that waits for a key
			got := make(chan string, 1)
			go func() {
				k, _ := q.Get()
				got <- k
				q.Done(k)
			}()
			synctest.Wait()
			return got
		}

		getNow("a")
		check("new queue", false, 0)
		time.Sleep(yieldAfter)
		check("yieldAfter after New", false, 0)
		time.Sleep(time.Nanosecond)
		check("no Get waited since New, for longer than yieldAfter", true, 0) // keys added before the workers came
		getNow("b")
		check("a Get while saturated", true, 1)
		getNow("b2")
		check("a Get within yieldEvery of the last yield", true, 1)
		time.Sleep(yieldEvery - time.Nanosecond)
		getNow("b3")
		check("a Get a nanosecond short of yieldEvery after the last yield", true, 1)
		time.Sleep(time.Nanosecond)

		got := waiting() // it yields first: still saturated when it came
		time.Sleep(time.Second)
		check("a Get is waiting", false, 2)
		q.Add("c")
		if k := <-got; k != "c" {
			t.Fatalf("the waiting Get got %q, want c", k)
		}
		getNow("d")
		check("a Get stopped waiting just now", false, 2)
		time.Sleep(yieldAfter + time.Nanosecond)
		check("yieldAfter since a Get stopped waiting", true, 2)
		getNow("e")
		check("a Get that did not wait", true, 3)

		time.Sleep(yieldEvery)
		first, second := waiting(), waiting() // the first yields, the second does not
		time.Sleep(time.Second)
		q.Add("f")
		synctest.Wait()
		time.Sleep(time.Second)
		check("one of two waiting Gets woke, the other still waits", false, 4)
		q.ShutDown()
		for _, ch := range []<-chan string{first, second} {
			if k := <-ch; k != "f" && k != "" {
				t.Fatalf("a waiting Get got %q, want f or the shutdown's zero key", k)
			}
		}
		check("the Get woken by ShutDown stopped waiting just now", false, 4)
		time.Sleep(yieldAfter + time.Nanosecond)
		check("yieldAfter after ShutDown woke the last Get", true, 4)
	})
}

// oneClock stands for the queue's pool of per-processor clocks, as if every
// Get ran on one processor: sync.Pool drops items at random under the race
// detector.
type oneClock struct{ c yieldClock }

func (o *oneClock) Get() any { return &o.c }
func (o *oneClock) Put(any)  {}

// Each processor yields on its own clock: Gets at the same instant on two
// processors both yield (one clock shared by the queue let one worker skip
// every yield while its processor's timers waited).
func TestQueue_GetYieldsOnEachProcessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		var yields atomic.Int32
		q.yield = func() { yields.Add(1) }
		procs := &twoClocks{}
		q.yielded = procs
		time.Sleep(yieldAfter + time.Nanosecond) // saturated: no Get has waited
		for _, k := range []string{"a", "b", "c", "d"} {
			q.Add(k)
		}
		for i, want := range []int32{1, 2, 2, 2} { // processors 0, 1, 0, 1 at one instant
			k, _ := q.Get()
			q.Done(k)
			if got := yields.Load(); got != want {
				t.Fatalf("after Get %d: %d yields, want %d", i, got, want)
			}
		}
		time.Sleep(yieldEvery)
		q.Add("e")
		q.Add("f")
		for _, k := range []string{"e", "f"} {
			if got, _ := q.Get(); got != k {
				t.Fatalf("Get() = %q, want %q", got, k)
			}
			q.Done(k)
		}
		if got := yields.Load(); got != 4 {
			t.Fatalf("yieldEvery later, after a Get on each processor: %d yields, want 4", got)
		}
	})
}

// twoClocks stands for the pool as two processors taking turns.
type twoClocks struct {
	c    [2]yieldClock
	next int
}

func (p *twoClocks) Get() any {
	c := &p.c[p.next]
	p.next = 1 - p.next
	return c
}
func (p *twoClocks) Put(any) {}

// A yield that kept the processor away for longer than yieldSlow makes
// Gets stop yielding for yieldCalm times as long after it (at most
// maxCalm): the
// goroutines yielded to did not give it back soon, and every yield would
// cost the worker as much.
func TestQueue_GetStopsYieldingForAWhileAfterASlowYield(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		var yields atomic.Int32
		slow := time.Duration(0)
		q.yield = func() {
			yields.Add(1)
			time.Sleep(slow) // what the processor spent on others
		}
		q.yielded = &oneClock{}
		get := func(wantYields int32, when string) {
			t.Helper()
			q.Add("k")
			k, _ := q.Get()
			q.Done(k)
			if got := yields.Load(); got != wantYields {
				t.Fatalf("%s: %d yields in all, want %d", when, got, wantYields)
			}
		}
		time.Sleep(yieldAfter + time.Nanosecond) // saturated
		slow = yieldSlow
		get(1, "a yield of exactly yieldSlow")
		time.Sleep(yieldEvery)
		slow = 2 * yieldSlow
		get(2, "a yield slower than yieldSlow")
		slow = 0
		time.Sleep(yieldCalm*2*yieldSlow - time.Nanosecond)
		get(2, "a nanosecond before the calm ends")
		time.Sleep(time.Nanosecond)
		get(3, "the calm over")
		time.Sleep(yieldEvery)
		slow = time.Hour // neighbours that never give the processor back
		get(4, "a yield of an hour")
		slow = 0
		time.Sleep(maxCalm - time.Nanosecond)
		get(4, "within maxCalm of the hour's end")
		time.Sleep(time.Nanosecond)
		get(5, "maxCalm after the hour-long yield ended")
	})
}
