package workqueue

import (
	"flag"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestQueue_AddAfterHandsOutTheKeyWhenItsTimeComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		start := time.Now()
		q.AddAfter("b", 2*time.Second)
		q.AddAfter("a", time.Second)
		for _, want := range []struct {
			key   string
			after time.Duration
		}{{"a", time.Second}, {"b", 2 * time.Second}} {
			k, _ := q.Get() // blocks; the bubble's clock jumps to the next timer
			if k != want.key || time.Since(start) != want.after {
				t.Fatalf("Get() = %q after %v, want %q after %v", k, time.Since(start), want.key, want.after)
			}
			q.Done(k)
		}
	})
}

// delayed runs f in a bubble with a queue on a fake clock.
func delayed(t *testing.T, f func(t *testing.T, q *Queue[string], clk *fakeClock)) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		q := newTestQueue(t, Options[string]{Clock: clk})
		f(t, q, clk)
	})
}

// advance moves the fake clock and waits until the delay goroutine is idle.
func advance(clk *fakeClock, d time.Duration) {
	clk.step(d)
	synctest.Wait()
}

func TestQueue_AddAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adds  []time.Duration // AddAfter("a", d) for each
		ready time.Duration   // when "a" must be queued, and not a moment before
	}{
		{"a key is not ready before its delay", []time.Duration{time.Second}, time.Second},
		{"the earlier time wins when added later", []time.Duration{3 * time.Second, time.Second}, time.Second},
		{"the earlier time wins when added first", []time.Duration{time.Second, 3 * time.Second}, time.Second},
		{"zero adds now", []time.Duration{0}, 0},
		{"a negative delay adds now", []time.Duration{-time.Minute}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delayed(t, func(t *testing.T, q *Queue[string], clk *fakeClock) {
				for _, d := range tc.adds {
					q.AddAfter("a", d)
				}
				synctest.Wait()
				if tc.ready > 0 {
					advance(clk, tc.ready-time.Nanosecond)
					wantLen(0)(t, q)
					advance(clk, time.Nanosecond)
				}
				wantLen(1)(t, q)
				get("a")(t, q)
				done("a")(t, q)
				advance(clk, 24*time.Hour)
				wantLen(0)(t, q) // the other, later AddAfter collapsed into the first
			})
		})
	}
}

func TestQueue_ConcurrentAddAfterEarliestWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 100
		clk := newFakeClock()
		q := newTestQueue(t, Options[int]{Clock: clk})
		var wg sync.WaitGroup
		for g := range 4 { // goroutine g delays every key by 4-g seconds
			wg.Go(func() {
				for k := range keys {
					q.AddAfter(k, time.Duration(4-g)*time.Second)
				}
			})
		}
		wg.Wait()
		advance(clk, time.Second-time.Nanosecond)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len() = %d before the earliest delay passed, want 0", n)
		}
		advance(clk, time.Nanosecond)
		if n := q.Len(); n != keys {
			t.Fatalf("Len() = %d at the earliest delay, want all %d keys", n, keys)
		}
		for range keys {
			k, _ := q.Get()
			q.Done(k)
		}
		advance(clk, time.Hour)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len() = %d after the later delays passed, want 0: they collapsed into the earliest", n)
		}
	})
}

func TestQueue_AddAfterIsIndependentOfTheQueuedKey(t *testing.T) {
	delayed(t, func(t *testing.T, q *Queue[string], clk *fakeClock) {
		q.AddAfter("a", 0)
		q.AddAfter("a", time.Hour)
		get("a")(t, q)
		done("a")(t, q)
		advance(clk, time.Hour)
		wantLen(1)(t, q) // the delayed add still happens, like a later Add would
		q.AddAfter("a", time.Minute)
		advance(clk, time.Minute)
		wantLen(1)(t, q) // and collapses with the key if it is still queued
	})
}

func TestQueue_AddAfterDoesNotTickWhileIdle(t *testing.T) {
	delayed(t, func(t *testing.T, q *Queue[string], clk *fakeClock) {
		q.AddAfter("a", time.Second)
		q.AddAfter("b", 2*time.Second)
		synctest.Wait()
		if n := clk.armed(); n != 1 {
			t.Fatalf("%d timers armed for two delayed keys, want 1", n)
		}
		advance(clk, 2*time.Second)
		wantLen(2)(t, q)
		if n := clk.armed(); n != 0 {
			t.Fatalf("%d timers armed with nothing delayed, want 0", n)
		}
		calls := clk.calls()
		advance(clk, time.Hour)
		if got := clk.calls(); got != calls {
			t.Fatalf("timer created or reset %d times while idle, want 0", got-calls)
		}
	})
}

func TestQueue_AddAfterStartsNoGoroutineForReadyKeys(t *testing.T) {
	q := newTestQueue(t, Options[string]{})
	q.AddAfter("a", 0)
	q.Add("b")
	q.delay.mu.Lock()
	started := q.delay.started
	q.delay.mu.Unlock()
	if started {
		t.Fatal("the delay goroutine started though no key had to wait")
	}
	wantLen(2)(t, q)
}

func TestQueue_ShutDownDropsDelayedKeysAndJoinsTheGoroutine(t *testing.T) {
	leakcheck.Check(t) // fails if the delay goroutine outlives ShutDown
	q := newTestQueue(t, Options[string]{})
	q.AddAfter("a", time.Hour)
	q.ShutDown()
	q.AddAfter("b", time.Hour)
	wantLen(0)(t, q)
	getShutdown()(t, q)
}

func TestDelayer_AfterNeverWaitsForTheGoroutine(t *testing.T) {
	leakcheck.Check(t)
	const keys = 10_000
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		added = map[int]bool{}
		all   = make(chan struct{})
	)
	d := newDelayer(newRealClock(), func(k int, _ int32) {
		<-release // the goroutine is stuck until every after call returned
		mu.Lock()
		defer mu.Unlock()
		added[k] = true
		if len(added) == keys {
			close(all)
		}
	})
	past := time.Now().Add(-time.Second)
	for k := range keys {
		d.after(k, 0, past)
	}
	close(release)
	<-all
	d.stop()
}

var heapSeed = flag.Uint64("heapseed", 0, "seed for TestDelayHeap_MatchesASortedModel (0: random)")

func TestDelayHeap_MatchesASortedModel(t *testing.T) {
	seed := *heapSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -heapseed=%d)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	h := newDelayHeap[int]()
	model := map[int]waiting[int]{}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := base
	for range 5000 {
		if rnd.IntN(3) > 0 {
			w := waiting[int]{key: rnd.IntN(50), at: base.Add(time.Duration(rnd.IntN(1000)) * time.Millisecond), prio: int32(rnd.IntN(3))}
			h.add(w)
			if old, ok := model[w.key]; ok {
				w.at, w.prio = minTime(w.at, old.at), max(w.prio, old.prio)
			}
			model[w.key] = w
		} else {
			now = now.Add(time.Duration(rnd.IntN(50)) * time.Millisecond)
			checkPopReady(t, &h, model, now)
		}
		if err := h.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkPopReady pops the ready keys and compares them with the model: the
// earliest time and the highest priority of each key's adds.
func checkPopReady(t *testing.T, h *delayHeap[int], model map[int]waiting[int], now time.Time) {
	t.Helper()
	got := h.popReady(now, nil)
	var last time.Time
	for _, w := range got {
		m, ok := model[w.key]
		if !ok || m.at.After(now) || m.at.Before(last) || w != m {
			t.Fatalf("popReady(%v) returned %+v (model: %+v, %v), out of order, not ready or not merged", now, w, m, ok)
		}
		last = m.at
		delete(model, w.key)
	}
	for k, m := range model {
		if !m.at.After(now) {
			t.Fatalf("popReady(%v) left ready key %d (at %v)", now, k, m.at)
		}
	}
}
