package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

func TestReachability_unreachableOnceNoProbeAnsweredForTheBound(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const bound = 15 * time.Second
	refused := errors.New("GET /livez: connection refused")
	type probe struct {
		at  time.Duration // after t0
		err error
	}
	for _, tc := range []struct {
		name   string
		probes []probe
		now    time.Duration
		want   string // "" for reachable
	}{
		{name: "the last probe answered", probes: []probe{{0, nil}}, now: time.Hour},
		{name: "a failed probe within the bound of the last answer", probes: []probe{{0, nil}, {10 * time.Second, refused}},
			now: 14 * time.Second},
		{name: "a failed probe the bound after the last answer", probes: []probe{{0, nil}, {10 * time.Second, refused}},
			now: bound, want: "apiserver: no answer for 15s (bound 15s): GET /livez: connection refused"},
		{name: "failures long after the last answer", probes: []probe{{0, nil}, {5 * time.Second, refused}, {20 * time.Second, refused}},
			now: 21*time.Second + 340*time.Millisecond, want: "apiserver: no answer for 21.3s (bound 15s)"},
		{name: "an answer after failures", probes: []probe{{0, nil}, {5 * time.Second, refused}, {20 * time.Second, nil}},
			now: 30 * time.Second},
		{name: "failures after an answer that ended an outage count from that answer",
			probes: []probe{{0, nil}, {5 * time.Second, refused}, {20 * time.Second, nil}, {21 * time.Second, refused}},
			now:    34 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r reachability
			for _, p := range tc.probes {
				r.record(t0.Add(p.at), p.err)
			}
			err := r.unreachable(t0.Add(tc.now), bound)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unreachable = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("unreachable = %v, want %q...", err, tc.want)
			}
		})
	}
}

func TestFailingInformer_namesASyncedInformerWhoseListsAndWatchesFailedForTheBound(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)
	const bound = 15 * time.Second
	rerr := &reflector.Error{Op: reflector.OpWatch, Resource: "configmaps/v1 in namespace x",
		Err: errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")}
	wrapped := fmt.Errorf("informer: cache of configmaps/v1 in namespace x did not sync: last error: %w", rerr)
	for _, tc := range []struct {
		name  string
		since time.Duration // before now; 0: not failing
		err   error
		want  string
	}{
		{name: "no failure", since: 0, err: nil},
		{name: "failing for less than the bound", since: 14 * time.Second, err: wrapped},
		{name: "failing for the bound", since: bound, err: wrapped,
			want: "informer configmaps/v1 in namespace x: lists and watches failing for 15s (bound 15s): " +
				"watch configmaps/v1 in namespace x: dial tcp 127.0.0.1:6443: connect: connection refused"},
		{name: "a failure begun between the two reads", since: 0, err: wrapped},
		{name: "a recovery between the two reads", since: time.Minute, err: nil},
		{name: "an error that is not the reflector's is quoted whole", since: time.Minute, err: errors.New("boom"),
			want: "informer configmaps/v1 in namespace x: lists and watches failing for 1m0s (bound 15s): boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := informer.Status{Name: "configmaps/v1 in namespace x", Synced: true, Err: tc.err}
			if tc.since != 0 {
				st.FailingSince = now.Add(-tc.since)
			}
			if got := failingInformer(st, now, bound); got != tc.want {
				t.Errorf("failingInformer =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// fakeServer is what apiProbe probes: up (answers), stopped (silent until
// the probe's timeout, as a SIGSTOPped server) or dead (refuses at once).
type fakeServer struct {
	mu     sync.Mutex
	state  string
	probes int
}

func (f *fakeServer) set(state string) {
	f.mu.Lock()
	f.state = state
	f.mu.Unlock()
}

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

func (f *fakeServer) probe(ctx context.Context) error {
	f.mu.Lock()
	f.probes++
	state := f.state
	f.mu.Unlock()
	switch state {
	case "up":
		return nil
	case "dead":
		return errors.New("GET /livez: connection refused")
	}
	<-ctx.Done()
	return fmt.Errorf("GET /livez: %w", ctx.Err())
}

// readinessChecker asks p every period, as a kubelet does, in a synctest
// bubble.
type readinessChecker struct {
	t      *testing.T
	p      *apiProbe
	period time.Duration
}

// until asks every period until the answer is unreachable (or reachable,
// when unreachable is false) and returns how long that took, failing the
// test after max.
func (c readinessChecker) until(unreachable bool, max time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		if err := c.p.check(time.Now()); (err != nil) == unreachable {
			return time.Since(start)
		}
		if time.Since(start) > max {
			c.t.Fatalf("after %s, still %v; want unreachable=%v", max, c.p.check(time.Now()), unreachable)
		}
		time.Sleep(c.period)
		synctest.Wait()
	}
}

// during asks every period for d and fails the test on an answer of
// unreachable.
func (c readinessChecker) during(d time.Duration) {
	c.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if err := c.p.check(time.Now()); err != nil {
			c.t.Fatalf("at %s: %v, want reachable", time.Now().Format(time.TimeOnly), err)
		}
		time.Sleep(c.period)
		synctest.Wait()
	}
}

// runProbe runs p in the bubble until the test ends.
func runProbe(t *testing.T, p *apiProbe) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v, want nil", err)
		}
	})
	synctest.Wait()
}

func TestAPIProbe_aServerThatStopsIsUnreachableWithinTheBoundAndReachableOnceItAnswers(t *testing.T) {
	// The first 503 comes at the first check at least the bound after
	// the last answer, which came at most a period (or probeEvery) before
	// the outage: between bound-max(period, probeEvery) and bound+period
	// after it. Once the server answers again, a probe answers within
	// probeEvery (a dead server's probes fail at once and are retried) or
	// the timeout (a stopped server's probe in flight), and the next check
	// is ready.
	for _, tc := range []struct {
		name   string
		outage string        // stopped or dead
		period time.Duration // between readiness checks
		back   time.Duration // the longest from the server's return to ready
	}{
		{name: "a stopped server, checked every 100ms", outage: "stopped", period: 100 * time.Millisecond, back: 5100 * time.Millisecond},
		{name: "a dead server, checked every 100ms", outage: "dead", period: 100 * time.Millisecond, back: 1100 * time.Millisecond},
		{name: "a stopped server, checked every 10s as by a kubelet", outage: "stopped", period: 10 * time.Second, back: 10 * time.Second},
		{name: "a dead server, checked every 10s as by a kubelet", outage: "dead", period: 10 * time.Second, back: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &fakeServer{state: "up"}
				p := newAPIProbe(srv.probe, 0)
				if p.bound != defaultUnreachableBound || p.timeout != 5*time.Second {
					t.Fatalf("bound %s, timeout %s; want the defaults 15s and 5s", p.bound, p.timeout)
				}
				runProbe(t, p)
				c := readinessChecker{t: t, p: p, period: tc.period}
				c.during(time.Minute)

				srv.set(tc.outage)
				took := c.until(true, time.Minute)
				if lo, hi := p.bound-max(tc.period, probeEvery), p.bound+tc.period; took < lo || took > hi {
					t.Errorf("unreachable %s after the outage began, want between %s and %s", took, lo, hi)
				}
				for range 5 {
					if p.check(time.Now()) == nil {
						t.Fatal("reachable again while the server is still down")
					}
					time.Sleep(tc.period)
					synctest.Wait()
				}

				srv.set("up")
				if took := c.until(false, time.Minute); took > tc.back {
					t.Errorf("reachable %s after the server answered again, want at most %s", took, tc.back)
				}
			})
		})
	}
}

func TestAPIProbe_checksAreNotAmplifiedIntoProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{state: "up"}
		p := newAPIProbe(srv.probe, 0)
		runProbe(t, p)
		if n := srv.count(); n != 0 {
			t.Fatalf("%d probes before any check, want none", n)
		}
		for i := range 10 {
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			for range 1000 {
				_ = p.check(time.Now())
			}
			synctest.Wait()
		}
		if n := srv.count(); n != 1 {
			t.Errorf("10,000 checks within a second made %d probes, want 1", n)
		}
		time.Sleep(time.Minute) // no checks, no probes
		synctest.Wait()
		if n := srv.count(); n != 2 { // the check left waiting in the wake channel
			t.Errorf("%d probes after a quiet minute, want 2", n)
		}
	})
}

func TestAPIProbe_oneFailedProbeIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{state: "up"}
		p := newAPIProbe(srv.probe, 0)
		runProbe(t, p)
		c := readinessChecker{t: t, p: p, period: 10 * time.Second}
		c.during(time.Minute)
		srv.set("dead")
		_ = p.check(time.Now()) // one probe fails...
		synctest.Wait()
		srv.set("up") // ...and the retry, a second later, is answered
		time.Sleep(c.period - time.Second)
		synctest.Wait()
		if n := srv.count(); n != 8 { // 6 checks, the failed probe, its retry
			t.Errorf("%d probes, want 8", n)
		}
		c.during(time.Minute)
	})
}
