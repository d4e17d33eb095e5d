package workqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// tracker instruments workers: it fails the test if two workers hold one
// key at once, and remembers, for each key, how many adds the latest
// processing of it covered.
type tracker struct {
	t        *testing.T
	mu       sync.Mutex
	busy     map[int]bool
	adds     []atomic.Int64 // adds[k]: Add calls for k so far (counted before Add)
	covered  []int64        // covered[k]: adds[k] when a worker last started on k; guarded by mu
	handouts atomic.Int64
}

func newTracker(t *testing.T, keys int) *tracker {
	return &tracker{t: t, busy: map[int]bool{}, adds: make([]atomic.Int64, keys), covered: make([]int64, keys)}
}

func (tr *tracker) add(q *Queue[int], k int) {
	tr.adds[k].Add(1)
	q.Add(k)
}

// work processes k as a worker would, checking that no one else holds it.
func (tr *tracker) work(k int) {
	tr.mu.Lock()
	if tr.busy[k] {
		tr.t.Errorf("key %d handed to two workers at once", k)
	}
	tr.busy[k] = true
	tr.covered[k] = tr.adds[k].Load()
	tr.mu.Unlock()
	tr.handouts.Add(1)
	runtime.Gosched() // widen the window for a second worker to arrive
	tr.mu.Lock()
	tr.busy[k] = false
	tr.mu.Unlock()
}

// runWorkers starts n workers that process keys until Get reports shutdown;
// the returned function waits for them.
func runWorkers(q *Queue[int], n int, work func(int)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				work(k)
				q.Done(k)
			}
		})
	}
	return wg.Wait
}

func TestQueue_ConcurrentWorkersNeverShareAKeyAndMissNoAdd(t *testing.T) {
	leakcheck.Check(t)
	const keys, producers, addsEach = 8, 4, 2000
	q := newTestQueue(t, Options[int]{})
	tr := newTracker(t, keys)
	wait := runWorkers(q, 4, tr.work)
	var prod sync.WaitGroup
	for p := range producers {
		prod.Go(func() {
			for i := range addsEach {
				tr.add(q, (p+i)%keys)
			}
		})
	}
	prod.Wait()
	if err := q.ShutDownWithDrain(t.Context()); err != nil {
		t.Fatalf("ShutDownWithDrain: %v", err)
	}
	wait()
	for k := range keys {
		if got, want := tr.covered[k], tr.adds[k].Load(); got != want {
			t.Errorf("key %d: the last processing started after %d of its %d adds; an add made while it was processed was lost", k, got, want)
		}
	}
	if n := tr.handouts.Load(); n < keys || n > producers*addsEach {
		t.Errorf("handed out %d times, want between %d and %d", n, keys, producers*addsEach)
	}
}

func TestQueue_ConcurrentDuplicatesCollapse(t *testing.T) {
	leakcheck.Check(t)
	const keys = 100
	q := newTestQueue(t, Options[int]{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				q.Add(k)
			}
		})
	}
	wg.Wait()
	if got := q.Len(); got != keys {
		t.Fatalf("Len() = %d after 8 goroutines added the same %d keys, want %d", got, keys, keys)
	}
	seen := map[int]bool{}
	for range keys {
		k, _ := q.Get()
		if seen[k] {
			t.Fatalf("key %d handed out twice", k)
		}
		seen[k] = true
	}
}

func TestQueue_ConcurrentReAddDuringProcessingIsQueuedAgain(t *testing.T) {
	leakcheck.Check(t)
	q := newTestQueue(t, Options[int]{})
	tr := newTracker(t, 1)
	var rounds atomic.Int64
	wait := runWorkers(q, 4, func(k int) {
		tr.work(k)
		if rounds.Add(1) < 100 {
			// Another goroutine re-adds the key while this worker holds it.
			var wg sync.WaitGroup
			wg.Go(func() { tr.add(q, k) })
			wg.Wait()
		}
	})
	tr.add(q, 0)
	if err := drainWhen(t, q, func() bool { return rounds.Load() >= 100 }); err != nil {
		t.Fatal(err)
	}
	wait()
	if got := rounds.Load(); got != 100 {
		t.Fatalf("key processed %d times, want 100 (1 add + 99 re-adds during processing)", got)
	}
}

// drainWhen waits (yielding, with a deadline) until cond holds, then shuts q
// down with drain.
func drainWhen(t *testing.T, q *Queue[int], cond func() bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			return fmt.Errorf("condition not met before the deadline: %w", ctx.Err())
		}
		runtime.Gosched()
	}
	return q.ShutDownWithDrain(ctx)
}

func TestQueue_ConcurrentQueuedKeysAreHandedOutAfterShutDown(t *testing.T) {
	leakcheck.Check(t)
	const keys = 1000
	q := newTestQueue(t, Options[int]{})
	for k := range keys {
		q.Add(k)
	}
	q.ShutDown()
	tr := newTracker(t, keys)
	runWorkers(q, 4, tr.work)()
	if got := tr.handouts.Load(); got != keys {
		t.Fatalf("workers got %d keys after ShutDown, want all %d", got, keys)
	}
}

func TestQueue_ConcurrentAddAfterShutDownIsIgnored(t *testing.T) {
	leakcheck.Check(t)
	q := newTestQueue(t, Options[int]{})
	q.ShutDown()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 100 {
				q.Add(g*100 + k)
				q.AddAfter(k, time.Hour)
			}
		})
	}
	wg.Wait()
	if got := q.Len(); got != 0 {
		t.Fatalf("Len() = %d after adds following ShutDown, want 0", got)
	}
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get after ShutDown on an empty queue did not report shutdown")
	}
}

func TestQueue_ConcurrentDrainWaitsForWorkers(t *testing.T) {
	leakcheck.Check(t)
	const keys = 500
	q := newTestQueue(t, Options[int]{})
	tr := newTracker(t, keys)
	for k := range keys {
		tr.add(q, k)
	}
	wait := runWorkers(q, 3, tr.work)
	if err := q.ShutDownWithDrain(t.Context()); err != nil {
		t.Fatalf("ShutDownWithDrain: %v", err)
	}
	if got := tr.handouts.Load(); got != keys {
		t.Fatalf("ShutDownWithDrain returned after %d of %d keys were processed", got, keys)
	}
	wait()
}

// ShutDown while ShutDownWithDrain waits forces the shutdown: the drain
// returns at once with ErrDrainAbandoned, as client-go's returns.
func TestQueue_ShutDownEndsAWaitingDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[int]{})
		q.Add(1)
		q.Add(2)
		k, _ := q.Get() // held by a worker that is stuck; 2 still queued
		done := make(chan error)
		go func() { done <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("ShutDownWithDrain returned %v before the queue drained", err)
		default:
		}
		q.ShutDown()
		if err := <-done; !errors.Is(err, ErrDrainAbandoned) {
			t.Fatalf("ShutDownWithDrain after ShutDown = %v, want ErrDrainAbandoned", err)
		}
		q.Done(k)
		if k, shutdown := q.Get(); shutdown || k != 2 { // what was queued is still handed out
			t.Fatalf("Get after the forced shutdown = %v, %v; want 2, false", k, shutdown)
		}
	})
}

// A ShutDown before ShutDownWithDrain does not end the drain: only one
// called while it waits does (as in client-go).
func TestQueue_DrainAfterShutDownStillWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[int]{})
		q.Add(1)
		k, _ := q.Get()
		q.ShutDown()
		done := make(chan error)
		go func() { done <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("ShutDownWithDrain returned %v with a key still processing", err)
		default:
		}
		q.Done(k)
		if err := <-done; err != nil {
			t.Fatalf("ShutDownWithDrain once drained = %v, want nil", err)
		}
	})
}

func TestQueue_DrainGivesUpAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[int]{})
		q.Add(1)
		k, _ := q.Get() // held by a worker that is stuck
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := q.ShutDownWithDrain(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ShutDownWithDrain = %v, want context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("ShutDownWithDrain gave up after %v, want 5s", waited)
		}
		q.Done(k)
	})
}
