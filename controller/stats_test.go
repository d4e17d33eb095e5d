package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

func TestController_statsCountReconcilesErrorsRetriesAndKeepTheLastErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cs calls
		c := newController(t, func(_ context.Context, key string) (Result, error) {
			switch {
			case key == "ns/panics":
				panic("boom")
			case key == "ns/bad" && cs.add() <= 3:
				return Result{}, fmt.Errorf("attempt %d failed", cs.count())
			}
			return Result{}, nil
		}, Options[string]{Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}, MaxRetries: 4})
		stop := runInBubble(t, c)
		c.Add("ns/bad")
		c.Add("ns/good")
		time.Sleep(time.Second)
		synctest.Wait()
		st := c.Stats()
		if st.Reconciles != 5 || st.Errors != 3 || st.Retries != 3 || st.Panics != 0 || st.Queue.Depth != 0 || !st.Synced {
			t.Errorf("stats = %+v, want 5 reconciles, 3 errors, 3 retries", st)
		}
		if len(st.LastErrors) != 3 || st.LastErrors[0].Err != "attempt 3 failed" || st.LastErrors[0].Attempt != 3 ||
			st.LastErrors[2].Attempt != 1 || st.LastErrors[0].Key != "ns/bad" {
			t.Errorf("last errors = %+v, want attempts 3, 2, 1, newest first", st.LastErrors)
		}
		if ks := c.KeyStats("ns/bad"); ks.LastError != nil || ks.Attempts != 0 {
			t.Errorf("KeyStats after success = %+v, want no error and no attempts", ks)
		}
		c.Add("ns/panics") // MaxRetries 4: retried 4 times, then dropped
		time.Sleep(time.Second)
		synctest.Wait()
		st = c.Stats()
		if st.Panics != 5 || st.Errors != 8 || st.Retries != 7 {
			t.Errorf("after a panicking key: %d panics, %d errors, %d retries; want 5, 8, 7", st.Panics, st.Errors, st.Retries)
		}
		if ks := c.KeyStats("ns/panics"); ks.LastError == nil || ks.LastError.Attempt != 5 {
			t.Errorf("KeyStats of the dropped key = %+v, want its last error kept", ks)
		}
		stop()
	})
}

func TestController_inFlightNamesTheKeysInReconcileAndAnErrorIsDatedWhenItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		c := newController(t, func(_ context.Context, key string) (Result, error) {
			<-release // plain Add: no reason is noted, the key is in flight all the same
			time.Sleep(3 * time.Second)
			return Result{}, errors.New("failed")
		}, Options[string]{Workers: 2})
		stop := runInBubble(t, c)
		start := time.Now()
		c.Add("ns/a")
		c.Add("ns/b")
		synctest.Wait() // both workers hold a key
		got := c.InFlight()
		slices.Sort(got)
		if !slices.Equal(got, []string{"ns/a", "ns/b"}) {
			t.Errorf("InFlight() = %v, want ns/a and ns/b", got)
		}
		close(release)
		time.Sleep(3 * time.Second)
		synctest.Wait() // both failed and wait out their backoff
		if got := c.InFlight(); len(got) != 0 {
			t.Errorf("InFlight() after the reconciles = %v, want none", got)
		}
		errs := c.Stats().LastErrors
		if len(errs) != 2 || !errs[0].At.Equal(start.Add(3*time.Second)) || !errs[1].At.Equal(start.Add(3*time.Second)) {
			t.Errorf("LastErrors = %+v, want two dated 3s after the start, when the reconciles ended", errs)
		}
		stop()
	})
}

func TestController_keyStatsSayWhereAKeyIsAndWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		requeued := false
		c := newController(t, func(_ context.Context, key string) (Result, error) {
			if key == "ns/block" {
				<-release
			}
			if key == "ns/x" && !requeued {
				requeued = true
				return Result{RequeueAfter: time.Minute}, nil
			}
			return Result{}, nil
		}, Options[string]{Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
		stop := runInBubble(t, c)
		start := time.Now()
		c.AddBecause("ns/block", Reason{Event: "add", Source: "cms"})
		synctest.Wait() // the only worker holds ns/block
		c.AddBecause("ns/x", Reason{Event: "update", Source: "cms"})
		time.Sleep(time.Second)
		c.AddBecause("ns/x", Reason{Event: "delete", Source: "cms"})

		ks := c.KeyStats("ns/x")
		if !ks.Queue.Queued || ks.Queue.Position != 0 || !ks.Queue.Since.Equal(start) || ks.Adds != 2 ||
			ks.First.Event != "update" || ks.Last.Event != "delete" || ks.Last.Source != "cms" || !ks.Last.At.Equal(start.Add(time.Second)) {
			t.Errorf("KeyStats(ns/x) = %+v, want queued first in line since the update, then a delete", ks)
		}
		if ks := c.KeyStats("ns/block"); !ks.Queue.Processing || ks.First.Event != "add" || ks.Adds != 1 {
			t.Errorf("KeyStats(ns/block) = %+v, want processing, added by an add event", ks)
		}
		st := c.Stats()
		if st.Queue.Oldest == nil || st.Queue.Oldest.Key != "ns/x" || len(st.Queue.Processing) != 1 ||
			st.Queue.Processing[0].Key != "ns/block" || !st.Queue.Processing[0].Since.Equal(start) {
			t.Errorf("queue stats = %+v", st.Queue)
		}
		if got := fmt.Sprint(ks.Last); got != "delete of cms" {
			t.Errorf("Reason.String = %q", got)
		}

		close(release)
		synctest.Wait() // ns/x reconciled once: requeued after a minute
		ks = c.KeyStats("ns/x")
		if ks.Queue.Queued || ks.Last.Event != "requeue after" || !ks.Last.Due.Equal(ks.Last.At.Add(time.Minute)) {
			t.Errorf("KeyStats(ns/x) after RequeueAfter = %+v", ks)
		}
		if got := fmt.Sprint(ks.Last); got != "requeue after (due 1m0s after)" {
			t.Errorf("Reason.String = %q", got)
		}
		if ks := c.KeyStats("ns/nobody"); ks != (KeyStats[string]{}) {
			t.Errorf("KeyStats of an unknown key = %+v, want zero", ks)
		}
		stop()
	})
}

func TestTracker_keepsTheLastErrorsNewestFirst(t *testing.T) {
	var tr tracker[int]
	now := time.Now()
	for i := range RecentErrors + 5 {
		tr.finished(i, 0, errors.New("e"), 1, now.Add(time.Duration(i)))
	}
	got := tr.lastErrors()
	if len(got) != RecentErrors || got[0].Key != RecentErrors+4 || got[RecentErrors-1].Key != 5 {
		t.Fatalf("last errors: %d, first %d, last %d; want %d, newest %d, oldest 5",
			len(got), got[0].Key, got[len(got)-1].Key, RecentErrors, RecentErrors+4)
	}
	tr.finished(7, 0, nil, 0, now)
	if _, failing := tr.failing[7]; failing {
		t.Error("a success did not clear the key's error")
	}
}

// A key's reasons stay small enough for a map to hold them in place: a
// larger value would cost an allocation at every add with a reason.
func TestTracker_aKeysReasonsFitInAMapSlot(t *testing.T) {
	if n := unsafe.Sizeof(why{}); n > 128 {
		t.Errorf("why is %d bytes, over the 128 a map holds in place", n)
	}
}

// The reasons of every queued key are kept in a map: their values hold no
// pointer (the collector skips them) and stay small; a flood of distinct
// reason texts is bounded, the excess read as otherLabel.
func TestTracker_reasonsHoldNoPointerAndTheirTextsAreBounded(t *testing.T) {
	if n := unsafe.Sizeof(why{}); n > 64 {
		t.Errorf("why is %d bytes, want at most 64", n)
	}
	if hasPointers(reflect.TypeFor[why]()) {
		t.Error("why holds a pointer")
	}
	tr := &tracker[string]{epoch: time.Now()}
	for i := range maxLabels + 10 {
		tr.note(fmt.Sprint("k", i), Reason{Event: fmt.Sprint("event ", i), Source: "informer"})
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.labels) != maxLabels {
		t.Errorf("%d texts kept, want %d", len(tr.labels), maxLabels)
	}
	if got := tr.unpack(tr.why["k5"].last); got.Event != "event 5" || got.Source != "informer" {
		t.Errorf("an early reason reads %+v, want event 5 of informer", got)
	}
	if got := tr.unpack(tr.why[fmt.Sprint("k", maxLabels+5)].last); got.Event != otherLabel || got.Source != "informer" {
		t.Errorf("a reason past the bound reads %+v, want %q of informer", got, otherLabel)
	}
}

// hasPointers reports whether a value of t holds a pointer.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	}
	return true
}

// checkingHandler calls check on every log record, from the goroutine
// that logs it.
type checkingHandler struct{ check func(msg string) }

func (h checkingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h checkingHandler) Handle(_ context.Context, r slog.Record) error {
	h.check(r.Message)
	return nil
}
func (h checkingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h checkingHandler) WithGroup(string) slog.Handler      { return h }

// Whoever sees a failed reconcile's error (Stats, KeyStats: the debug
// page) sees why the key comes back: the retry is noted before the
// outcome is told. Checked at every line the controller logs, the
// failure's own included, when an earlier order told the error first.
func TestController_anErrorIsToldWithItsRetryNoted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c *Controller[string]
		var checked int
		check := func(msg string) {
			if c == nil || len(c.Stats().LastErrors) == 0 || strings.Contains(msg, "dropping the key") { // dropped: no retry
				return
			}
			checked++
			ks := c.KeyStats("ns/bad")
			if ks.LastError == nil || ks.Attempts == 0 || ks.Adds == 0 || ks.Last.Event != "retry after error" {
				t.Errorf("at %q: the error is told, KeyStats = %+v; want its retry noted (an attempt, the reason)", msg, ks)
			}
		}
		c = newController(t, func(context.Context, string) (Result, error) {
			return Result{}, errors.New("it is bad")
		}, Options[string]{MaxRetries: 3, Telemetry: telemetry.Telemetry{Logger: slog.New(checkingHandler{check})}})
		stop := runInBubble(t, c)
		c.Add("ns/bad")
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		if checked == 0 {
			t.Error("no log line came after the first error: nothing was checked")
		}
	})
}
