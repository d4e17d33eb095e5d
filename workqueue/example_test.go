package workqueue_test

import (
	"fmt"
	"time"

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
