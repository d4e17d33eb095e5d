package reflector

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The reflector runs in a bubble on an in-memory ListerWatcher: its clock
// is the bubble's, so backoffs pass at once and times compare exactly.
func TestReflector_FailingSinceMarksTheStartOfARunOfFailuresUntilAWatchOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("connection reset by peer")
		lw := newFakeLW(page("10", pod("a", "5")), failing(down)) // the first list succeeds, then every list fails
		lw.watchErr = down
		r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		synctest.Wait() // listed, the first watch failed, now backing off
		began := time.Now()
		st := r.Stats()
		if !st.FailingSince.Equal(began) || r.LastError() == nil {
			t.Fatalf("after the first failed watch: FailingSince %v, LastError %v; want %v and an error", st.FailingSince, r.LastError(), began)
		}

		time.Sleep(time.Minute) // the relists after the failed watch keep failing, backing off
		synctest.Wait()
		st = r.Stats()
		if !st.FailingSince.Equal(began) || st.ListErrors < 2 || st.WatchErrors != 1 {
			t.Errorf("a minute of failures later: FailingSince %v (want %v, the run's start), %d list and %d watch errors",
				st.FailingSince, began, st.ListErrors, st.WatchErrors)
		}
		if !st.LastErrorAt.After(began) {
			t.Errorf("LastErrorAt %v, want the latest failure, after %v", st.LastErrorAt, began)
		}

		lw.mu.Lock()
		lw.lists = append(lw.lists, page("20", pod("b", "15")))
		lw.watchErr = nil
		lw.mu.Unlock()
		time.Sleep(time.Minute) // the next attempt, after the backoff, succeeds
		synctest.Wait()
		if st := r.Stats(); !st.FailingSince.IsZero() || r.LastError() != nil || st.WatchSince.IsZero() {
			t.Errorf("once a list succeeded and a watch opened: FailingSince %v, LastError %v, WatchSince %v; want zero, nil, set",
				st.FailingSince, r.LastError(), st.WatchSince)
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil on cancel", err)
		}
	})
}
