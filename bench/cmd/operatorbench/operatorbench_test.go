package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// lockedBuffer is a buffer safe for the build's, the server's and the
// operators' concurrent output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOperatorBench_endToEnd runs a tiny workload with both operators as
// real processes on the real server: every run converges (run fails
// otherwise), the figures were read, and the report has every row.
func TestOperatorBench_endToEnd(t *testing.T) {
	leakcheck.Check(t)
	var progress lockedBuffer
	cfg := config{Objects: 50, Updates: 100, Rate: 200, Namespaces: 50, Rounds: 1, AA: sideControllerRuntime,
		Timeout: time.Minute, Seed: 1}
	rep, err := run(t.Context(), cfg, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer func() {
		if t.Failed() {
			t.Log(progress.String())
		}
	}()
	rd := rep.Rounds[0]
	live := cfg.Objects - cfg.deletes() + 1 // and the probe
	for _, r := range []result{rd.Ctrlkit, rd.ControllerRuntime, rd.AA} {
		if r.Live != live || r.Requests <= 0 || r.RestartRequests <= 0 || r.PeakRSSKB <= 0 || r.ServerCPUMS <= 0 || r.RestartMS <= 0 {
			t.Errorf("%s: %+v; want %d live ConfigMaps, and requests, restart requests, RSS, server CPU and restart time above 0", r.Side, r, live)
		}
	}
	if rd.Ctrlkit.Side != sideCtrlkit || rd.ControllerRuntime.Side != sideControllerRuntime || rd.AA.Side != sideControllerRuntime {
		t.Errorf("sides: %s, %s, %s", rd.Ctrlkit.Side, rd.ControllerRuntime.Side, rd.AA.Side)
	}
	// The twin applies every Secret again at a start; examples/mirror skips
	// what its cache already holds.
	if cr := rd.ControllerRuntime; cr.RestartRequests < float64(live) {
		t.Errorf("controller-runtime's restart made %.0f requests; want at least one apply per object (%d)", cr.RestartRequests, live)
	}
	if ck := rd.Ctrlkit; ck.RestartRequests >= float64(live) {
		t.Errorf("examples/mirror's restart made %.0f requests for %d objects: it applied Secrets its cache already held", ck.RestartRequests, live)
	}
	var out bytes.Buffer
	writeReport(&out, rep)
	want := []string{"| metric | ctrlkit | controller-runtime | ctrlkit ÷ controller-runtime | A/A (controller-runtime ÷ controller-runtime) |"}
	for _, m := range metrics {
		want = append(want, "| "+m.name+" | ")
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, out.String())
		}
	}
}

func TestNewPlan_deletesAFifthSpreadAmongUpdatesOfSurvivors(t *testing.T) {
	cfg := config{Objects: 100, Updates: 380}
	p := newPlan(cfg, 7)
	deleted := map[int]bool{}
	var firstDelete, lastDelete int
	for i, c := range p.changes {
		if !c.delete {
			continue
		}
		if deleted[c.obj] {
			t.Fatalf("object %d deleted twice", c.obj)
		}
		if len(deleted) == 0 {
			firstDelete = i
		}
		deleted[c.obj], lastDelete = true, i
	}
	if len(deleted) != 20 || len(p.changes) != 400 {
		t.Fatalf("%d deletes in %d changes; want 20 in 400", len(deleted), len(p.changes))
	}
	if firstDelete > 20 || lastDelete < 380 {
		t.Errorf("deletes from change %d to %d; want them spread over the 400", firstDelete, lastDelete)
	}
	for _, c := range p.changes {
		if !c.delete && deleted[c.obj] {
			t.Fatalf("object %d is updated and deleted", c.obj)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		fail       bool
	}{
		{name: "user plus system ticks", want: 1230 * time.Millisecond,
			stat: "42 (mirror) S 1 42 42 0 -1 4194560 100 0 0 0 100 23 0 0 20 0 9 0 1000 1000000 2000 18446744073709551615"},
		{name: "a command name with spaces and parentheses", want: 50 * time.Millisecond,
			stat: "7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 2 3 0 0 20 0 1 0 1 1 1 1"},
		{name: "too short", stat: "7 (x) R 1", fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.stat))
			if (err != nil) != tc.fail || got != tc.want {
				t.Errorf("parseStatCPU = %v, %v; want %v (error: %v)", got, err, tc.want, tc.fail)
			}
		})
	}
}

func TestSumSeries_sumsEveryLabelSetOfTheNamesAsked(t *testing.T) {
	text := `# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="PATCH"} 30
workqueue_depth{controller="mirror",name="mirror"} 0
workqueue_depth_other 5
workqueue_band_depth{band="a b}"} 7
controller_runtime_reconcile_total{controller="mirror",result="success"} 4.1e+01 1700000000000
`
	got, err := sumSeries(strings.NewReader(text), metricRequests, metricDepth, metricReconciles, metricActive)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{metricRequests: 42, metricDepth: 0, metricReconciles: 41, metricActive: 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
}

func TestRatio(t *testing.T) {
	conv := func(r result) float64 { return r.ConvergeMS }
	rs := func(vs ...float64) []result {
		out := make([]result, len(vs))
		for i, v := range vs {
			out[i].ConvergeMS = v
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		a, b       []result
		resolution float64
		want       string
	}{
		{name: "the median of the rounds' ratios", a: rs(1, 4, 30), b: rs(2, 2, 10), want: "2×"},
		{name: "rounds with a zero denominator are left out", a: rs(1, 5), b: rs(0, 10), want: "0.5×"},
		{name: "rounds with both values below the resolution are left out", a: rs(0.1, 300), b: rs(0.2, 100), resolution: 100, want: "3×"},
		{name: "a value below the resolution counts as the resolution", a: rs(0.1), b: rs(200), resolution: 100, want: "0.5×"},
		{name: "every round below the resolution", a: rs(0.1), b: rs(0.2), resolution: 100, want: "both < 100"},
		{name: "no denominator", a: rs(1), b: rs(0), want: "n/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratio(tc.a, tc.b, conv, tc.resolution); got != tc.want {
				t.Errorf("ratio = %q; want %q", got, tc.want)
			}
		})
	}
}
