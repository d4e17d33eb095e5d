package workqueue_test

import (
	"fmt"
	"runtime"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

func ExampleQueue() {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	q.Add("default/web")
	q.Add("default/db")
	q.Add("default/web") // already queued: collapses
	q.ShutDown()         // queued keys are still handed out

	for {
		key, shutdown := q.Get()
		if shutdown {
			break
		}
		fmt.Println("sync", key)
		q.Done(key)
	}
	// Output:
	// sync default/web
	// sync default/db
}

// A worker loop that steps from each key to the next with DoneAndGet: one
// lock per key instead of two, and no other worker woken for the key this
// one takes next.
func ExampleQueue_DoneAndGet() {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	q.Add("default/web")
	q.Add("default/db")
	q.ShutDown() // queued keys are still handed out

	key, shutdown := q.Get()
	for !shutdown {
		fmt.Println("sync", key)
		key, shutdown = q.DoneAndGet(key)
	}
	// Output:
	// sync default/web
	// sync default/db
}

func ExampleQueue_AddRateLimited() {
	q, err := workqueue.New(workqueue.Options[string]{
		RateLimiter: workqueue.NewItemExponential[string](time.Millisecond, time.Second),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.ShutDown()

	q.Add("default/web")
	for attempt := 1; ; attempt++ {
		key, _ := q.Get()
		if attempt < 3 {
			fmt.Printf("attempt %d of %s failed, retries so far: %d\n", attempt, key, q.NumRequeues(key))
			q.AddRateLimited(key) // back off 1ms, then 2ms
			q.Done(key)
			continue
		}
		fmt.Printf("attempt %d of %s succeeded after %d retries\n", attempt, key, q.NumRequeues(key))
		q.Forget(key)
		q.Done(key)
		break
	}
	fmt.Println("retries after Forget:", q.NumRequeues("default/web"))
	// Output:
	// attempt 1 of default/web failed, retries so far: 0
	// attempt 2 of default/web failed, retries so far: 1
	// attempt 3 of default/web succeeded after 2 retries
	// retries after Forget: 0
}

// Keys of the initial list go in at LowPriority, a user's change at the
// default priority 0 and an urgent key above it: the highest priority is
// handed out first. Within a priority keys go out in the order they were
// added, but each namespace gets at most DefaultQuantum (4) keys a round,
// so the one key of "team-b" waits behind 4 keys of "team-a", not all of
// them.
func ExampleQueue_AddWithOpts() {
	q, err := workqueue.New(workqueue.Options[string]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, k := range []string{"team-a/1", "team-a/2", "team-a/3"} {
		q.AddWithOpts(k, workqueue.AddOpts{Priority: workqueue.LowPriority})
	}
	for _, k := range []string{"team-a/4", "team-a/5", "team-a/6", "team-a/7", "team-a/8"} {
		q.Add(k)
	}
	q.Add("team-b/1")
	q.AddWithOpts("team-a/2", workqueue.AddOpts{Priority: 10})     // already queued: moves up
	q.AddWithOpts("team-c/1", workqueue.AddOpts{After: time.Hour}) // delayed: dropped by ShutDown
	q.ShutDown()

	for {
		key, shutdown := q.Get()
		if shutdown {
			break
		}
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// team-a/2
	// team-a/4
	// team-a/5
	// team-a/6
	// team-a/7
	// team-b/1
	// team-a/8
	// team-a/1
	// team-a/3
}

// A fake clock of k8s.io/utils (as client-go's and controller-runtime's
// tests use) drives a queue's delays through ClockOf: a key added for a
// minute later is handed out once the fake clock has stepped a minute.
func ExampleClockOf() {
	fake := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := workqueue.New(workqueue.Options[string]{Clock: workqueue.ClockOf(fake.Now, fake.NewTimer)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.ShutDown()
	q.AddAfter("default/web", time.Minute)
	for !fake.HasWaiters() { // the queue's delay goroutine has set its timer
		runtime.Gosched()
	}
	fmt.Println("queued before the minute:", q.Len())
	fake.Step(time.Minute)
	key, _ := q.Get()
	fmt.Println("handed out after it:", key)
	// Output:
	// queued before the minute: 0
	// handed out after it: default/web
}
