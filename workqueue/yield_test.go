package workqueue

import (
	"testing"
	"testing/synctest"
	"time"
)

// Get yields its processor only while the workers are saturated: no Get is
// waiting for a key and none has waited for yieldAfter.
func TestQueue_saturatedOnlyWhileNoGetWaitsOrHasWaitedLately(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		check := func(when string, want bool) {
			t.Helper()
			if got := q.saturated(); got != want {
				t.Fatalf("%s: saturated() = %v, want %v", when, got, want)
			}
		}
		check("new queue", false)
		time.Sleep(yieldAfter)
		check("yieldAfter after New", false)
		time.Sleep(time.Nanosecond)
		check("no Get waited since New, longer than yieldAfter", true) // a backlog added before the workers came

		got := make(chan string)
		go func() {
			k, _ := q.Get()
			got <- k
		}()
		synctest.Wait() // the Get waits for a key
		time.Sleep(time.Second)
		check("a Get is waiting", false)

		q.Add("a")
		if k := <-got; k != "a" {
			t.Fatalf("Get() = %q, want a", k)
		}
		check("a Get stopped waiting just now", false)
		time.Sleep(yieldAfter + time.Nanosecond)
		check("yieldAfter since the last Get that waited", true)

		q.Add("b")
		if k, _ := q.Get(); k != "b" { // queued: it does not wait
			t.Fatalf("Get() = %q, want b", k)
		}
		check("after a Get that did not wait", true)
		q.Done("a")
		q.Done("b")
	})
}
