package workqueue

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var fairSeed = flag.Uint64("fairseed", 0, "run TestQueue_RandomPrioritiesDelaysAndShutDownsLoseNoKey with this seed only")

func TestQueue_FlowsOfABandShareItInRounds(t *testing.T) {
	for _, tc := range []struct {
		quantum int
		want    string
	}{
		{1, "[noisy/k0 quiet/a other/b noisy/k1 noisy/k2]"},
		{0, "[noisy/k0 noisy/k1 noisy/k2 noisy/k3 quiet/a other/b noisy/k4]"}, // DefaultQuantum: 4
		{3, "[noisy/k0 noisy/k1 noisy/k2 quiet/a other/b noisy/k3 noisy/k4]"},
	} {
		t.Run(fmt.Sprintf("quantum %d", tc.quantum), func(t *testing.T) {
			q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{Quantum: tc.quantum}})
			for i := range 1000 {
				q.Add(fmt.Sprintf("noisy/k%d", i))
			}
			q.Add("quiet/a")
			q.Add("other/b")
			var got []string
			for range strings.Count(tc.want, " ") + 1 {
				k, _ := q.Get()
				got = append(got, k)
				q.Done(k)
			}
			if fmt.Sprint(got) != tc.want {
				t.Fatalf("handed out %v, want %s: each flow gets its quantum in a round", got, tc.want)
			}
		})
	}
}

// TestQueue_KeysWithinTheirQuantumGoOutInArrivalOrder: while no flow holds
// more than its quantum, flows do not reorder keys: a namespace's second
// key goes out in its place, not after every other namespace's first.
func TestQueue_KeysWithinTheirQuantumGoOutInArrivalOrder(t *testing.T) {
	q := newTestQueue(t, Options[string]{})
	want := []string{"a/1", "b/1", "a/2", "c/1", "a/3", "b/2", "d/1", "a/4", "c/2"}
	for _, k := range want {
		q.Add(k)
	}
	var got []string
	for range want {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed out %v, want arrival order %v", got, want)
	}
}

// TestQueue_AFlowThatComesBackKeepsItsRound: a flow that had its quantum
// and went idle does not get a fresh one by coming back within the round.
func TestQueue_AFlowThatComesBackKeepsItsRound(t *testing.T) {
	q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{Quantum: 2}})
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		q.Add(k)
	}
	get("a/1")(t, q)
	get("a/2")(t, q) // a has had its quantum of this round and is idle
	q.Add("a/3")     // comes back: next round
	q.Add("b/2")     // added later, but in this round
	get("b/1")(t, q)
	get("b/2")(t, q)
	get("a/3")(t, q)
}

func TestQueue_AQueuedKeyKeepsTheHigherPriorityAndTheEarlierTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		q.AddWithOpts("ns/a", AddOpts{Priority: LowPriority})
		q.AddWithOpts("ns/b", AddOpts{Priority: LowPriority})
		q.AddWithOpts("ns/b", AddOpts{Priority: 5}) // moves up
		q.AddWithOpts("ns/a", AddOpts{Priority: LowPriority - 1})
		q.AddWithOpts("ns/c", AddOpts{After: time.Minute, Priority: 1})
		q.AddWithOpts("ns/c", AddOpts{After: time.Second, Priority: -1}) // earlier time, lower priority
		time.Sleep(time.Second)
		synctest.Wait()
		want := []BandState{{Priority: 5, Depth: 1}, {Priority: 1, Depth: 1}, {Priority: LowPriority, Depth: 1}}
		got := q.Bands()
		for i := range got {
			got[i].Oldest = time.Time{}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("bands after 1s = %v, want %v", got, want)
		}
		for _, k := range []string{"ns/b", "ns/c", "ns/a"} {
			get(k)(t, q)
		}
	})
}

// TestQueue_AgingBoundsTheWaitOfLowerBands keeps two workers busy (50µs a
// key) with a flood of keys at priority top, far more than they can handle,
// and checks that a key added meanwhile at each lower priority p is handed
// out once it has waited (top - p) * AgingStep, not before, and at most one
// hand-out (one key's work) later.
func TestQueue_AgingBoundsTheWaitOfLowerBands(t *testing.T) {
	const step, work = 10 * time.Millisecond, 50 * time.Microsecond
	for _, tc := range []struct {
		name    string
		top     int
		watched []int // priorities of the keys watched
	}{
		{"a low key under a load of priority 0", 0, []int{LowPriority}},
		{"two lower bands under a load of priority 10", 10, []int{0, LowPriority}},
		{"a band one step below", 1, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newTestQueue(t, Options[int]{Fairness: Fairness[int]{AgingStep: step}})
				handed := map[int]time.Time{}
				var mu sync.Mutex
				flood := func(n int) {
					for j := range 8 {
						q.AddWithOpts(8*n+j, AddOpts{Priority: tc.top})
					}
				}
				flood(0) // before the watched keys, so no idle worker takes them at once
				start := time.Now()
				for i, p := range tc.watched {
					q.AddWithOpts(-1-i, AddOpts{Priority: p})
				}
				wait := runWorkers(q, 2, func(k int) {
					if k < 0 {
						mu.Lock()
						handed[k] = time.Now()
						mu.Unlock()
					}
					time.Sleep(work)
				})
				longest := time.Duration(tc.top-tc.watched[len(tc.watched)-1]) * step
				// The flood: 8 keys every 100µs (the workers take 4), one flow (int keys).
				for n := 1; time.Since(start) < longest+10*time.Millisecond; n++ {
					time.Sleep(100 * time.Microsecond)
					flood(n)
				}
				if q.Len() < 500 {
					t.Errorf("the flood left %d keys queued; it must outpace the workers", q.Len())
				}
				q.ShutDown()
				for q.Len() > 0 { // drain the flood without the workers' pace
					k, _ := q.Get()
					q.Done(k)
				}
				wait()
				for i, p := range tc.watched {
					bound := time.Duration(tc.top-p) * step
					at, ok := handed[-1-i]
					if !ok {
						t.Errorf("the key at priority %d was never handed out (bound %v)", p, bound)
						continue
					}
					if waited := at.Sub(start); waited < bound || waited > bound+work {
						t.Errorf("the key at priority %d waited %v under load, want between %v and %v", p, waited, bound, bound+work)
					}
				}
			})
		})
	}
}

func TestQueue_RandomPrioritiesDelaysAndShutDownsLoseNoKey(t *testing.T) {
	seeds := []uint64{*fairSeed}
	if *fairSeed == 0 {
		seeds = nil
		for s := range uint64(40) {
			seeds = append(seeds, s+1)
		}
	}
	for _, seed := range seeds {
		for _, early := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed %d, shut down early %v", seed, early), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { randomRun(t, seed, early) })
			})
		}
	}
}

// randomRun has 3 producers add 32 keys in 4 flows at random priorities,
// some delayed, some rate limited, while 3 workers (which re-add some keys
// while holding them) process them. With early set, the queue is shut down
// while producers run: every plain add that returned before ShutDown must
// still be processed after it. Otherwise the queue is drained once every
// delay has passed: every add must be processed after it. No key may be
// held by two workers at once, nor more keys of a flow than its in-flight
// cap (none, 1 or 2 by seed), and nothing may be left running.
func randomRun(t *testing.T, seed uint64, early bool) {
	t.Logf("seed %d (rerun with -fairseed %d)", seed, seed)
	const keys = 32
	maxInFlight := int(seed % 3)
	q := newTestQueue(t, Options[int]{
		Fairness: Fairness[int]{AgingStep: time.Millisecond, FlowKey: func(k int) string { return fmt.Sprint(k % 4) },
			MaxInFlight: maxInFlight},
		RateLimiter: NewItemExponential[int](time.Millisecond, 20*time.Millisecond),
	})
	var inFlight [4]atomic.Int64 // keys held by workers, per flow
	tr := newTracker(t, keys)
	var returned [keys]atomic.Int64 // plain adds that returned, per key
	prios := []int{LowPriority, -1, 0, 3}
	add := func(rnd *rand.Rand, k int) {
		o := AddOpts{Priority: prios[rnd.IntN(len(prios))]}
		switch rnd.IntN(4) {
		case 0:
			o.After = time.Duration(rnd.IntN(5000)) * time.Microsecond
		case 1:
			o.RateLimited = true
		}
		tr.adds[k].Add(1)
		q.AddWithOpts(k, o)
		if !o.RateLimited && o.After == 0 {
			returned[k].Add(1)
		}
	}
	var producing atomic.Bool
	producing.Store(true)
	var rndMu sync.Mutex
	workRnd := rand.New(rand.NewPCG(seed, 1000))
	wait := runWorkers(q, 3, func(k int) {
		if n := inFlight[k%4].Add(1); maxInFlight > 0 && n > int64(maxInFlight) {
			t.Errorf("flow %d: %d keys held at once, cap %d", k%4, n, maxInFlight)
		}
		defer inFlight[k%4].Add(-1)
		tr.work(k)
		rndMu.Lock()
		if producing.Load() && workRnd.IntN(4) == 0 {
			add(workRnd, k) // re-added while held: queued again at Done
		}
		d := time.Duration(workRnd.IntN(200)) * time.Microsecond
		rndMu.Unlock()
		time.Sleep(d)
	})
	var producers sync.WaitGroup
	for p := range 3 {
		producers.Go(func() {
			rnd := rand.New(rand.NewPCG(seed, 100+uint64(p)))
			for range 300 {
				add(rnd, rnd.IntN(keys))
				time.Sleep(time.Duration(rnd.IntN(100)) * time.Microsecond)
			}
		})
	}
	var must [keys]int64
	if early {
		time.Sleep(time.Duration(rand.New(rand.NewPCG(seed, 0)).IntN(20000)) * time.Microsecond)
		for k := range must {
			must[k] = returned[k].Load()
		}
		q.ShutDown()
	} else {
		producers.Wait()
		producing.Store(false)
		time.Sleep(time.Second) // every delay and backoff has passed
		synctest.Wait()
	}
	if err := q.ShutDownWithDrain(t.Context()); err != nil {
		t.Fatalf("ShutDownWithDrain: %v", err)
	}
	producers.Wait()
	wait()
	q.mu.Lock()
	err := q.core.checkInvariants(q.flowKey)
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		want := tr.adds[k].Load()
		if early {
			want = must[k]
		}
		// covered counts the adds begun before the processing started, so
		// it may exceed the adds that returned.
		if got := tr.covered[k]; got < want {
			t.Errorf("key %d: its last processing started after %d adds, want at least %d: an add was lost", k, got, want)
		}
	}
}

// TestQueue_ForgettingIdleFlowsGivesNoFreshShare: a band forgets idle
// flows once it has more than sweepIdle of them, but not one that had
// keys out in the current round, which would come back with a fresh share
// and overtake a flow waiting for the next round.
func TestQueue_ForgettingIdleFlowsGivesNoFreshShare(t *testing.T) {
	q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{Quantum: 1}})
	q.Add("v/1")
	q.Add("v/2")
	get("v/1")(t, q) // v had its share of round 0: v/2 waits for round 1
	noisy := 0
	for i := range 5 {
		q.Add(fmt.Sprintf("a/%d", i))
		for j := range sweepIdle + 100 { // flows that go idle in turn: sweeps
			q.Add(fmt.Sprintf("n%d-%d/k", i, j))
		}
		for range sweepIdle + 101 {
			k, _ := q.Get()
			q.Done(k)
			switch {
			case k == "v/2":
				if noisy > 2 {
					t.Fatalf("a had %d keys out before v/2; want at most 2 (2 * Quantum)", noisy)
				}
				return
			case strings.HasPrefix(k, "a/"):
				noisy++
			}
		}
	}
	t.Fatalf("v/2 not handed out; a had %d keys out", noisy)
}

// TestQueue_AFlowAtItsInFlightCapLeavesWorkersToTheOthers: with
// MaxInFlight 2, a flow with two keys out waits while the others' keys go
// out, a worker with nothing else to get waits for one of its keys to be
// Done, and keys left parked at ShutDown still go out to the workers that
// finish that flow's keys.
func TestQueue_AFlowAtItsInFlightCapLeavesWorkersToTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{MaxInFlight: 2}})
		for i := range 5 {
			q.Add(fmt.Sprintf("noisy/k%d", i))
		}
		got := make(chan string, 1)
		get := func() {
			go func() {
				k, shutdown := q.Get()
				if shutdown {
					k = "shutdown"
				}
				got <- k
			}()
			synctest.Wait()
		}
		expect := func(want string) {
			t.Helper()
			select {
			case k := <-got:
				if k != want {
					t.Fatalf("Get() = %s, want %s", k, want)
				}
			default:
				t.Fatalf("Get() waits, want %s", want)
			}
		}
		get()
		expect("noisy/k0")
		get()
		expect("noisy/k1")
		get() // noisy has 2 out: this worker waits
		select {
		case k := <-got:
			t.Fatalf("Get() = %s with noisy at its cap and nothing else queued", k)
		default:
		}
		q.Add("quiet/a")
		synctest.Wait()
		expect("quiet/a")
		get()
		q.Done("noisy/k0") // noisy is under its cap again: the waiting worker gets its next key
		synctest.Wait()
		expect("noisy/k2")
		if n := q.Len(); n != 2 {
			t.Fatalf("Len() = %d, want 2 (noisy/k3, noisy/k4 parked)", n)
		}
		q.ShutDown()
		get() // noisy at its cap: a worker with nothing to get is told to stop
		expect("shutdown")
		q.Done("noisy/k1") // the worker that held it gets the flow's next key
		get()
		expect("noisy/k3")
		q.Done("noisy/k2")
		get()
		expect("noisy/k4")
		q.Done("noisy/k3")
		q.Done("noisy/k4")
		q.Done("quiet/a")
		get()
		expect("shutdown")
		q.mu.Lock()
		defer q.mu.Unlock()
		if err := q.core.checkInvariants(q.flowKey); err != nil {
			t.Fatal(err)
		}
	})
}

// DoneAndGet hands its caller the next key as Done then Get would: the key
// it finished with when that was added again meanwhile, a key of a flow
// that its Done took below the cap, or another flow's; and after ShutDown,
// the keys still queued, then shutdown.
func TestQueue_DoneAndGetIsDoneThenGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{MaxInFlight: 1}})
		q.Add("a/1")
		k, _ := q.Get()
		q.Add("a/2") // a is at its cap: parked
		q.Add("a/1") // added again while processing: queued behind a/2 at Done
		if k, shutdown := q.DoneAndGet(k); k != "a/2" || shutdown {
			t.Fatalf("DoneAndGet(a/1) = %q, %v; want a/2 (a under its cap again)", k, shutdown)
		}
		if k, _ := q.DoneAndGet("a/2"); k != "a/1" {
			t.Fatalf("DoneAndGet(a/2) = %q, want a/1 (added again while it was processed)", k)
		}
		q.Add("b/1")
		q.ShutDown()
		if k, shutdown := q.DoneAndGet("a/1"); k != "b/1" || shutdown {
			t.Fatalf("DoneAndGet(a/1) after ShutDown = %q, %v; want b/1, still queued", k, shutdown)
		}
		if k, shutdown := q.DoneAndGet("b/1"); !shutdown {
			t.Fatalf("DoneAndGet(b/1) = %q, want shutdown", k)
		}
		select {
		case <-q.drained:
		default:
			t.Fatal("the queue is not drained after the last key was done")
		}
	})
}

// DoneAndGet wakes no waiting worker for the key its caller takes: not
// when its Done takes a capped flow with a backlog below its cap, nor when
// the key it finished was added again meanwhile. Done alone does wake one
// in both cases (the control: the count sees wake-ups, and these are the
// cases that send one).
func TestQueue_DoneAndGetWakesNobodyForTheKeyItTakes(t *testing.T) {
	// countWakes makes a queue of flows capped at one key in flight whose
	// wake-ups are counted, and a Get that waits on it, whose key arrives on
	// the channel returned.
	countWakes := func(t *testing.T) (*Queue[string], *atomic.Int32, func() <-chan string) {
		q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{MaxInFlight: 1}})
		wakes := new(atomic.Int32)
		signal := q.wake
		q.wake = func() { wakes.Add(1); signal() }
		waitingGet := func() <-chan string {
			got := make(chan string, 1)
			go func() {
				k, _ := q.Get()
				got <- k
			}()
			synctest.Wait() // it waits in Get
			return got
		}
		return q, wakes, waitingGet
	}
	synctest.Test(t, func(t *testing.T) {
		q, wakes, waitingGet := countWakes(t)
		q.Add("a/1")
		k, _ := q.Get()
		q.Add("a/2") // a is at its cap: parked, nobody woken
		waiter := waitingGet()
		if k, _ = q.DoneAndGet(k); k != "a/2" {
			t.Fatalf("DoneAndGet took %q, want a/2 (a under its cap again)", k)
		}
		q.Add("a/2") // added again while processed: queued at its Done
		if k, _ = q.DoneAndGet(k); k != "a/2" {
			t.Fatalf("DoneAndGet took %q, want a/2 again", k)
		}
		synctest.Wait()
		if got := wakes.Load(); got != 0 {
			t.Errorf("%d wake-ups while the stepping worker took every key, want 0", got)
		}
		q.Add("b/1") // the waiter's
		if k := <-waiter; k != "b/1" {
			t.Errorf("the waiting worker got %q, want b/1", k)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		q, wakes, waitingGet := countWakes(t)
		q.Add("a/1")
		k, _ := q.Get()
		q.Add("a/2")
		waiter := waitingGet()
		q.Done(k) // a under its cap again: the waiter is woken for a/2
		if k := <-waiter; k != "a/2" || wakes.Load() != 1 {
			t.Fatalf("after Done of a capped flow's key the waiter got %q with %d wake-ups, want a/2 and 1", k, wakes.Load())
		}
		q.Add("a/2") // added again while the waiter processes it
		waiter = waitingGet()
		q.Done("a/2") // queued again: the second waiter is woken for it
		if k := <-waiter; k != "a/2" || wakes.Load() != 2 {
			t.Fatalf("after Done of a key added again the waiter got %q with %d wake-ups, want a/2 and 2", k, wakes.Load())
		}
	})
}

// Workers that step with DoneAndGet (and, beside them, workers that call
// Done then Get), over flows at small in-flight caps and three priority
// bands, with keys added one by one and in batches, and added again while
// they are processed, lose no wake-up: every key added is handed out, and
// none is left queued while a worker waits (synctest reports a deadlock if
// workers wait with keys they could take); ShutDown and ShutDownWithDrain
// end them.
func TestQueue_DoneAndGetLosesNoWakeup(t *testing.T) {
	for seed := range uint64(24) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{MaxInFlight: 1 + int(seed%3), AgingStep: time.Millisecond}})
			workers := 2 + int(seed%3)
			var (
				mu      sync.Mutex
				pending = map[string]int{} // adds not yet followed by a hand-out
			)
			var wg sync.WaitGroup
			for w := range workers {
				wrng := rand.New(rand.NewPCG(seed, uint64(w)+1)) // each worker's own
				steps := w != 1                                  // worker 1 calls Done, then Get
				wg.Go(func() {
					k, shutdown := q.Get()
					for !shutdown {
						mu.Lock()
						delete(pending, k)
						if wrng.IntN(5) == 0 { // added again while processed
							pending[k]++
							q.AddWithPriority(k, wrng.IntN(3)-1)
						}
						mu.Unlock()
						time.Sleep(time.Duration(wrng.IntN(3)) * time.Millisecond) // a reconcile's work, in fake time
						if steps {
							k, shutdown = q.DoneAndGet(k)
						} else {
							q.Done(k)
							k, shutdown = q.Get()
						}
					}
				})
			}
			for i := range 300 {
				keys := make([]string, 1+rng.IntN(3))
				mu.Lock()
				for j := range keys {
					keys[j] = fmt.Sprintf("f%d/k%d", rng.IntN(3), rng.IntN(20))
					pending[keys[j]]++
				}
				mu.Unlock()
				if prio := rng.IntN(3) - 1; len(keys) == 1 {
					q.AddWithPriority(keys[0], prio)
				} else {
					q.AddBatch(keys, prio)
				}
				synctest.Wait()
				if w, k, ok := waitsBesideTakeable(q); ok {
					t.Fatalf("seed %d, add %d: %d workers wait in Get while %s could be handed out: a wake-up was lost", seed, i, w, k)
				}
				if i%7 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			for {
				synctest.Wait() // every worker busy in fake time or waiting in the queue
				if w, k, ok := waitsBesideTakeable(q); ok {
					t.Fatalf("seed %d: %d workers wait in Get while %s could be handed out: a wake-up was lost", seed, w, k)
				}
				mu.Lock()
				left := len(pending)
				mu.Unlock()
				if left == 0 && q.Len() == 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if seed%2 == 0 {
				q.ShutDown()
			} else if err := q.ShutDownWithDrain(t.Context()); err != nil {
				t.Fatalf("seed %d: ShutDownWithDrain: %v", seed, err)
			}
			wg.Wait()
			q.mu.Lock()
			defer q.mu.Unlock()
			if err := q.core.checkInvariants(q.flowKey); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitsBesideTakeable reports whether workers wait in Get while a key is
// queued that one of them could take (its flow under its cap), and how
// many wait and one such key's flow. Call it with every goroutine that uses
// q blocked (synctest.Wait): then it is a lost wake-up.
func waitsBesideTakeable(q *Queue[string]) (waiting int, flow string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	waiting = int(q.waiting.Load())
	if waiting == 0 {
		return 0, "", false
	}
	for _, b := range q.core.active {
		turns := slices.Clone(b.ready.heap)
		for i := range b.ready.run.Len() {
			turns = append(turns, *b.ready.run.At(i))
		}
		for _, tn := range turns {
			if tn.f.live > 0 && (q.core.full == nil || !q.core.full(tn.f.name)) {
				return waiting, tn.f.name, true
			}
		}
	}
	return waiting, "", false
}
