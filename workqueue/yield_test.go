package workqueue

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Get yields its processor only while the workers are saturated: no Get is
// waiting for a key and none stopped waiting in the last yieldAfter.
func TestQueue_GetYieldsOnlyWhileTheWorkersAreSaturated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{})
		var yields atomic.Int32
		q.yield = func() { yields.Add(1) }
		check := func(when string, saturated bool, wantYields int32) {
			t.Helper()
			if got := q.saturated(); got != saturated {
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
