package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// calls records when each reconcile of a key started (in the bubble's time).
type calls struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *calls) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = append(c.times, time.Now())
	return len(c.times)
}

func (c *calls) gaps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(c.times); i++ {
		out = append(out, c.times[i].Sub(c.times[i-1]))
	}
	return out
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.times)
}

// runInBubble starts c with one worker and returns a stop function that
// cancels it and checks Run's result.
func runInBubble(t *testing.T, c *Controller[string]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func newController(t *testing.T, rec ReconcileFunc[string], opts Options[string]) *Controller[string] {
	t.Helper()
	c, err := New[string](rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestController_anErrorRequeuesWithExponentialBackoffAndSuccessForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cs calls
		c := newController(t, func(context.Context, string) (Result, error) {
			if cs.add() <= 3 {
				return Result{}, errors.New("not yet")
			}
			return Result{}, nil
		}, Options[string]{})
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(time.Second)
		synctest.Wait()
		if got, want := fmt.Sprint(cs.gaps()), "[5ms 10ms 20ms]"; got != want {
			t.Errorf("gaps between attempts = %s, want %s", got, want)
		}
		if n := c.Queue().NumRequeues("ns/a"); n != 0 {
			t.Errorf("NumRequeues after success = %d, want 0 (forgotten)", n)
		}
		stop()
	})
}

func TestController_requeueAfterReconcilesAgainLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cs calls
		c := newController(t, func(context.Context, string) (Result, error) {
			if cs.add() == 1 {
				return Result{RequeueAfter: time.Minute}, nil
			}
			return Result{}, nil
		}, Options[string]{})
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := fmt.Sprint(cs.gaps()); got != "[1m0s]" {
			t.Errorf("gaps = %s, want one minute", got)
		}
		stop()
	})
}

func TestController_terminalErrorsAndTooManyRetriesStopRetrying(t *testing.T) {
	flaky := errors.New("flaky")
	for _, tc := range []struct {
		name       string
		errs       []error // one per attempt; the last repeats
		maxRetries int
		wantCalls  int
		wantTerm   float64 // controller_runtime_terminal_reconcile_errors_total
		wantDrop   float64 // ctrlkit_controller_dropped_keys_total{reason="max_retries"}
	}{
		{name: "a terminal error is not retried", errs: []error{Terminal(errors.New("bad spec"))}, wantCalls: 1, wantTerm: 1},
		{name: "a terminal error after retries stops them and forgets the failures",
			errs: []error{flaky, flaky, fmt.Errorf("sync: %w", Terminal(errors.New("bad")))}, wantCalls: 3, wantTerm: 1},
		{name: "max retries drops the key after the last retry", errs: []error{flaky}, maxRetries: 2, wantCalls: 3, wantDrop: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var cs calls
				reg := prometheus.NewRegistry()
				c := newController(t, func(context.Context, string) (Result, error) {
					n := cs.add()
					return Result{}, tc.errs[min(n, len(tc.errs))-1]
				}, Options[string]{MaxRetries: tc.maxRetries, Telemetry: telemetry.Telemetry{Registerer: reg}, Name: "t"})
				stop := runInBubble(t, c)
				c.Add("ns/a")
				time.Sleep(time.Hour)
				synctest.Wait()
				if n := cs.count(); n != tc.wantCalls {
					t.Errorf("%d reconciles, want %d", n, tc.wantCalls)
				}
				for _, m := range []struct {
					name string
					got  float64
					want float64
				}{
					{"controller_runtime_reconcile_total{result=error}", testutil.ToFloat64(c.metrics.reconciles.WithLabelValues("error")), float64(tc.wantCalls)},
					{"controller_runtime_reconcile_errors_total", testutil.ToFloat64(c.metrics.errs), float64(tc.wantCalls)},
					{"controller_runtime_terminal_reconcile_errors_total", testutil.ToFloat64(c.metrics.terminal), tc.wantTerm},
					{"ctrlkit_controller_dropped_keys_total{reason=max_retries}", testutil.ToFloat64(c.metrics.dropped.WithLabelValues("max_retries")), tc.wantDrop},
				} {
					if m.got != m.want {
						t.Errorf("%s = %v, want %v", m.name, m.got, m.want)
					}
				}
				if n := c.Queue().NumRequeues("ns/a"); n != 0 {
					t.Errorf("NumRequeues = %d, want 0: a key that is given up on is forgotten", n)
				}
				stop()
			})
		})
	}
}

func TestController_aPanicIsRecoveredCountedAndRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cs calls
		reg := prometheus.NewRegistry()
		c := newController(t, func(context.Context, string) (Result, error) {
			if cs.add() == 1 {
				var m map[string]int
				m["boom"]++ // a nil-map write: a real runtime panic
			}
			return Result{}, nil
		}, Options[string]{Telemetry: telemetry.Telemetry{Registerer: reg}, Name: "t"})
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(time.Second)
		synctest.Wait()
		if n := cs.count(); n != 2 {
			t.Errorf("%d reconciles, want 2 (the panic, then the retry)", n)
		}
		if n := testutil.ToFloat64(c.metrics.panics); n != 1 {
			t.Errorf("panics = %v, want 1", n)
		}
		if n := testutil.ToFloat64(c.metrics.reconciles.WithLabelValues("error")); n != 1 {
			t.Errorf("errors = %v, want 1: a panic counts as a failed reconcile", n)
		}
		stop()
	})
}

func TestController_aReconcileTimeoutHasItsOwnCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		causes := make(chan error, 1)
		c := newController(t, func(ctx context.Context, _ string) (Result, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return Result{}, Terminal(ctx.Err())
		}, Options[string]{ReconcileTimeout: 10 * time.Second, Name: "t", Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
		stop := runInBubble(t, c)
		c.Add("ns/a")
		if cause := <-causes; !errors.Is(cause, ErrReconcileTimeout) {
			t.Errorf("cause = %v, want ErrReconcileTimeout", cause)
		}
		synctest.Wait()
		if n := testutil.ToFloat64(c.metrics.timeouts); n != 1 {
			t.Errorf("controller_runtime_reconcile_timeouts_total = %v, want 1", n)
		}
		stop()
	})
}

func TestController_workersStartOnlyAfterCachesSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var synced atomic.Bool
		var cs calls
		c := newController(t, func(context.Context, string) (Result, error) { cs.add(); return Result{}, nil }, Options[string]{})
		c.WaitFor("pods", synced.Load, nil)
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := cs.count(); n != 0 {
			t.Fatalf("%d reconciles before the cache synced, want 0", n)
		}
		synced.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if n := cs.count(); n != 1 {
			t.Errorf("%d reconciles after the cache synced, want 1", n)
		}
		stop()
	})
}

// WaitForSynced starts the workers the moment the channel closes: no
// poll, so no time passes (synctest's clock moves only when every
// goroutine of the bubble waits on time).
func TestController_workersStartTheMomentASyncedChannelCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		synced := make(chan struct{})
		var cs calls
		c := newController(t, func(context.Context, string) (Result, error) { cs.add(); return Result{}, nil }, Options[string]{})
		c.WaitForSynced("pods", synced, nil)
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := cs.count(); n != 0 || c.HasSynced() {
			t.Fatalf("%d reconciles, HasSynced %v before the channel closed; want 0, false", n, c.HasSynced())
		}
		before := time.Now()
		close(synced)
		synctest.Wait()
		if n := cs.count(); n != 1 || !c.HasSynced() {
			t.Errorf("%d reconciles, HasSynced %v once the channel closed; want 1, true", n, c.HasSynced())
		}
		if waited := time.Since(before); waited != 0 {
			t.Errorf("the workers started %s after the channel closed, want at once", waited)
		}
		stop()
	})
}

func TestController_aCacheThatNeverSyncsIsLoggedOnceAndWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		var synced atomic.Bool
		var cs calls
		c := newController(t, func(context.Context, string) (Result, error) { cs.add(); return Result{}, nil },
			Options[string]{CacheSyncTimeout: 30 * time.Second, Telemetry: telemetry.Telemetry{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, nil))}})
		c.WaitFor("pods", func() bool { return true }, nil)
		c.WaitFor("deployments", synced.Load, func() error { return errors.New("forbidden (403)") })
		stop := runInBubble(t, c)
		c.Add("ns/a")
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		out := logs.String()
		if n := strings.Count(out, "caches not synced"); n != 1 || !strings.Contains(out, "deployments (forbidden (403))") ||
			strings.Contains(out, "caches=\"[pods") {
			t.Fatalf("after 5 minutes the log says %q; want one line naming deployments only", out)
		}
		if c.HasSynced() || cs.count() != 0 {
			t.Fatalf("HasSynced = %v with %d reconciles before the cache synced", c.HasSynced(), cs.count())
		}
		synced.Store(true) // e.g. the missing RBAC grant arrived: no restart needed
		time.Sleep(time.Second)
		synctest.Wait()
		if !c.HasSynced() || cs.count() != 1 {
			t.Errorf("HasSynced = %v, %d reconciles after the cache synced; want true, 1", c.HasSynced(), cs.count())
		}
		stop()
		if err := c.Run(t.Context()); !errors.Is(err, ErrStarted) {
			t.Errorf("second Run = %v, want ErrStarted", err)
		}
	})
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestController_shutdownCancelsReconcilesAtTheBoundAndAbandonsOnesThatIgnoreIt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ignore      bool // the reconcile ignores its context
		stopNow     bool // Run's context ends with ErrStopNow
		wantCause   error
		wantElapsed time.Duration
		wantErr     error
	}{
		{name: "a reconcile that honours its context ends at the bound", wantCause: ErrShutdownTimeout,
			wantElapsed: 30 * time.Second},
		{name: "a reconcile that ignores its context is abandoned a second later", ignore: true,
			wantCause: ErrShutdownTimeout, wantElapsed: 31 * time.Second, wantErr: ErrShutdownTimeout},
		{name: "stop now cancels in-flight reconciles at once", stopNow: true, wantCause: ErrStopNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				started, release := make(chan struct{}), make(chan struct{})
				causes := make(chan error, 1)
				c := newController(t, func(ctx context.Context, key string) (Result, error) {
					close(started)
					if tc.ignore {
						<-release
					} else {
						<-ctx.Done()
					}
					causes <- context.Cause(ctx)
					return Result{}, nil
				}, Options[string]{})
				ctx, cancel := context.WithCancelCause(t.Context())
				ran := make(chan error, 1)
				go func() { ran <- c.Run(ctx) }()
				c.Add("ns/stuck")
				<-started
				begin := time.Now()
				if tc.stopNow {
					cancel(ErrStopNow)
				} else {
					cancel(nil)
				}
				err := <-ran
				if elapsed := time.Since(begin); elapsed != tc.wantElapsed {
					t.Errorf("Run returned %s after cancel, want %s", elapsed, tc.wantElapsed)
				}
				if !errors.Is(err, tc.wantErr) || (err != nil && !strings.Contains(err.Error(), "ns/stuck")) {
					t.Errorf("Run = %v, want %v naming ns/stuck", err, tc.wantErr)
				}
				close(release)
				if cause := <-causes; !tc.ignore && !errors.Is(cause, tc.wantCause) {
					t.Errorf("reconcile context cause = %v, want %v", cause, tc.wantCause)
				}
			})
		})
	}
}

func TestController_shutdownLetsInFlightReconcilesFinishAndTakesNoNewKeys(t *testing.T) {
	leakcheck.Check(t)
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var done []string
	var ctxErrInFlight error
	c := newController(t, func(ctx context.Context, key string) (Result, error) {
		if key == "ns/slow" {
			close(started)
			<-release
			ctxErrInFlight = ctx.Err()
		}
		mu.Lock()
		done = append(done, key)
		mu.Unlock()
		return Result{}, nil
	}, Options[string]{})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	c.Add("ns/slow")
	<-started
	c.Add("ns/queued-1")
	c.Add("ns/queued-2")
	cancel()
	close(release)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if fmt.Sprint(done) != "[ns/slow]" || ctxErrInFlight != nil {
		t.Errorf("reconciled %v (in-flight ctx err %v); want only ns/slow, finished with a live context", done, ctxErrInFlight)
	}
}

func TestController_neverReconcilesOneKeyOnTwoWorkersAtOnce(t *testing.T) {
	leakcheck.Check(t)
	var inFlight sync.Map // key -> struct{}
	var total atomic.Int64
	sentinel := make(chan struct{})
	c := newController(t, func(_ context.Context, key string) (Result, error) {
		if key == "ns/sentinel" {
			close(sentinel)
			return Result{}, nil
		}
		if _, busy := inFlight.LoadOrStore(key, struct{}{}); busy {
			t.Errorf("%s reconciled by two workers at once", key)
		}
		defer inFlight.Delete(key)
		total.Add(1)
		return Result{}, nil
	}, Options[string]{Workers: 4})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				c.Add(fmt.Sprintf("ns/k%d", (i+p)%10))
			}
		})
	}
	wg.Wait()
	c.Add("ns/sentinel") // handed out after every key queued before it
	select {
	case <-sentinel:
	case <-time.After(30 * time.Second):
		t.Fatal("sentinel not reconciled within 30s")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if total.Load() < 10 {
		t.Errorf("%d reconciles, want at least one per key", total.Load())
	}
}

func TestController_resultPriorityQueuesTheNextReconcileAtThatPriority(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  Result
		err  error
	}{
		{"a requeue after a while", Result{RequeueAfter: time.Minute, Priority: workqueue.LowPriority}, nil},
		{"a retry after an error", Result{Priority: 5}, errors.New("flaky")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var first atomic.Bool
				c := newController(t, func(_ context.Context, key string) (Result, error) {
					if key == "ns/block" {
						<-release
						return Result{}, nil
					}
					if first.CompareAndSwap(false, true) {
						return tc.res, tc.err
					}
					return Result{}, nil
				}, Options[string]{})
				stop := runInBubble(t, c)
				c.Add("ns/a")
				synctest.Wait()
				c.Add("ns/block") // holds the only worker
				time.Sleep(time.Hour)
				synctest.Wait()
				bands := c.Queue().Bands()
				if len(bands) != 1 || bands[0].Priority != tc.res.Priority || bands[0].Depth != 1 {
					t.Errorf("queue bands = %+v, want ns/a alone at priority %d", bands, tc.res.Priority)
				}
				close(release)
				stop()
			})
		})
	}
}

// Close retires a controller: its series and its queue's leave the
// registry, so a controller of the same name can register again.
func TestController_closeUnregistersItsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := Options[string]{Telemetry: telemetry.Telemetry{Registerer: reg}, Name: "retired"}
	rec := ReconcileFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil })
	c, err := New(rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(rec, opts); err == nil {
		t.Fatal("a second controller of the same name registered while the first's series were there")
	}
	c.Close()
	c.Close() // twice: nothing more
	if families, _ := reg.Gather(); len(families) != 0 {
		t.Errorf("after Close the registry still has %d families, e.g. %s", len(families), families[0].GetName())
	}
	again, err := New(rec, opts)
	if err != nil {
		t.Fatalf("New of the same name after Close: %v", err)
	}
	again.Close()
}
