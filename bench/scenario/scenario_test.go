package scenario

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestRun_alternatesSidesAndSummarisesMediansAndTheAARatio(t *testing.T) {
	var order []string
	values := map[string][]float64{Ctrlkit: {10, 30, 20}, ClientGo: {40, 40, 40, 40, 40, 44}}
	calls := map[string]int{}
	s := Scenario{Name: "fake", Metrics: []Metric{{Name: "t", Unit: "ms", Better: "lower"}},
		Run: func(_ context.Context, side string) (Result, error) {
			order = append(order, side)
			v := values[side][calls[side]]
			calls[side]++
			return Result{"t": v}, nil
		}}
	sum, err := Run(t.Context(), s, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order[:6], ","); got != "ctrlkit,client-go,client-go,client-go,client-go,ctrlkit" {
		t.Errorf("order of the first two rounds = %s; want the sides alternated", got)
	}
	if r, aa := sum.Ratio("t"); r != 0.5 || aa < 0.99 || aa > 1.11 {
		t.Errorf("ratio %v (want 20/40), A/A %v (want about 1)", r, aa)
	}
	var b strings.Builder
	if err := Markdown(&b, []Summary{sum}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| fake | t (ms, lower is better) | 20.00 (10.00–30.00) |") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestRun_stopsAtAWrongResult(t *testing.T) {
	s := Scenario{Name: "broken", Run: func(context.Context, string) (Result, error) { return nil, errors.New("lost an event") }}
	if _, err := Run(t.Context(), s, 2, io.Discard); err == nil || !strings.Contains(err.Error(), "lost an event") {
		t.Fatalf("err = %v, want the run's error", err)
	}
}

func TestQueue_bothLibrariesProcessEveryAdd(t *testing.T) {
	s := Queue(QueueConfig{Keys: 200, Adds: 20000, Producers: 2, Workers: 2})
	for _, side := range []string{Ctrlkit, ClientGo} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if res["adds_per_sec"] <= 0 || res["p99_latency_us"] < res["p50_latency_us"] {
			t.Errorf("%s: implausible result %v", side, res)
		}
	}
}

func TestServer_bothLibrariesSyncEveryObjectFromTheRealServer(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{})
	kube := kubernetes.NewForConfigOrDie(srv.Config())
	ns := srv.Namespace(t)
	if err := Populate(t.Context(), kube, ns, 300); err != nil {
		t.Fatal(err)
	}
	s := Server(ServerConfig{Kube: kube, Namespace: ns, Objects: 300})
	for _, side := range []string{Ctrlkit, ClientGo} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if res["sync_ms"] <= 0 || res["bare_list_ms"] <= 0 {
			t.Errorf("%s: implausible result %v", side, res)
		}
		t.Logf("%s: %v", side, res)
	}
}

func TestPipeline_bothLibrariesProcessEveryEventAndCacheTheSource(t *testing.T) {
	s := Pipeline(PipelineConfig{Objects: 3000, Events: 20000, Namespaces: 10, PageSize: 500})
	if !slices.Equal(s.Extra, []string{Floor, CtrlkitMetrics, CtrlkitManager}) {
		t.Fatalf("extra sides %v, want the floor, the seed path with metrics and the manager", s.Extra)
	}
	for _, side := range []string{Ctrlkit, ClientGo, Floor, CtrlkitMetrics, CtrlkitManager} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		// The net allocations are the run's less the source's, measured on
		// its own: ctrlkit's pipeline allocates almost nothing per event
		// beyond the source (it reuses its delta slices), so its figure is
		// near zero and the subtraction's noise may take it a little below;
		// far below would mean the subtraction is wrong.
		if res["events_per_sec"] <= 0 || res["sync_ms"] <= 0 || res["allocs_per_event_net"] < -0.5 || res["live_heap_mb"] <= 0 {
			t.Errorf("%s: implausible result %v", side, res)
		}
		t.Logf("%s: %v", side, res)
	}
}

func TestPipelineInput_idOfReadsTheIdANameSaysAndRefusesAWrongKey(t *testing.T) {
	in := newPipelineInput(PipelineConfig{Objects: 300, Events: 100, Namespaces: 10, PageSize: 100})
	for id, key := range in.keys {
		ns, name, _ := strings.Cut(key, "/")
		if got, ok := in.idOf(ns, name); !ok || got != id {
			t.Fatalf("idOf(%q) = %d, %v; want %d", key, got, ok, id)
		}
	}
	for _, bad := range [][2]string{
		{"ns-001", "cm-0000002"}, // the namespace of another id
		{"ns-002", "cm-2"},       // too few digits
		{"ns-002", "cx-0000002"}, // another prefix
		{"ns-00x", "cm-0000002"}, // not a number
		{"ns-002", "cm-9999992"}, // an id the input does not have
		{"", "cm-0000002"},       // cluster-scoped
	} {
		if id, ok := in.idOf(bad[0], bad[1]); ok {
			t.Errorf("idOf(%q, %q) = %d, ok; want refused", bad[0], bad[1], id)
		}
	}
}

func TestPipeline_wireBothLibrariesDecodeTheServersBytesAndCacheTheSource(t *testing.T) {
	s := Pipeline(PipelineConfig{Objects: 3000, Events: 20000, Namespaces: 10, PageSize: 500, Wire: true})
	for _, side := range []string{Ctrlkit, ClientGo, ClientGoStrip, CtrlkitMetrics, CtrlkitManager} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		// Decoding a ConfigMap allocates its strings and maps: a side that
		// did not decode would allocate far less.
		if res["events_per_sec"] <= 0 || res["sync_ms"] <= 0 || res["allocs_per_event"] < 10 || res["live_heap_mb"] <= 0 {
			t.Errorf("%s: implausible result %v", side, res)
		}
		t.Logf("%s: %v", side, res)
	}
}

func TestMemory_bothLibrariesCacheEveryPodWithAndWithoutManagedFields(t *testing.T) {
	s := Memory(MemoryConfig{Objects: 2000, Namespaces: 10})
	for _, side := range []string{Ctrlkit, ClientGo} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		// The floor holds whole objects each with its own strings: client-go's
		// cache cannot go below it, ctrlkit's (which shares repeated strings)
		// must.
		below := res["bytes_per_object_stripped"] < res["floor_bytes_per_object_stripped"]
		if res["bytes_per_object_defaults"] <= 1000 || below != (side == Ctrlkit) {
			t.Errorf("%s: implausible result %v", side, res)
		}
		t.Logf("%s: %v", side, res)
	}
}

func TestRelist_bothLibrariesRelistAfter410AndKeepEveryObject(t *testing.T) {
	for _, s := range []Scenario{Relist(RelistConfig{Objects: 3000, Namespaces: 10}),
		Relist(RelistConfig{Objects: 3000, Namespaces: 10, Atomic: true})} {
		testRelist(t, s)
	}
}

func testRelist(t *testing.T, s Scenario) {
	for _, side := range []string{Ctrlkit, ClientGo} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if res["steady_mb"] <= 0 || res["peak_mb"] < res["steady_mb"]/2 || res["relist_ms"] <= 0 {
			t.Errorf("%s: implausible result %v", side, res)
		}
		t.Logf("%s: %v", side, res)
	}
}

var eventProfile = flag.String("eventprofile", "", "BenchmarkPipeline: write a CPU profile of S1's event phase to `prefix`.cpu "+
	"and heap profiles at its start and end to prefix.heap.start and prefix.heap.end (compare with pprof -base)")

var profilePhase = flag.String("profilephase", "events", "BenchmarkPipeline: the phase -eventprofile profiles: events or sync")

var wire = flag.Bool("wire", false, "BenchmarkPipeline: serve the input as protobuf bytes (S1 pipeline, protobuf)")

// BenchmarkPipeline runs S1 once per iteration and side at its default size,
// for profiling the event phase alone:
//
//	go test -run '^$' -bench 'Pipeline/ctrlkit' -benchtime 1x ./scenario/ -eventprofile /tmp/s1 [-wire]
func BenchmarkPipeline(b *testing.B) {
	cfg := PipelineConfig{Objects: 100000, Events: 500000, Namespaces: 100, PageSize: 500, Wire: *wire}
	net := "_net"
	if *wire {
		net = ""
	}
	if *eventProfile != "" {
		cfg.phase = func(name string) func() {
			if name != *profilePhase {
				return func() {}
			}
			return profileEvents(b, *eventProfile)
		}
	}
	s := Pipeline(cfg)
	for _, side := range []string{Ctrlkit, ClientGo, Floor, CtrlkitMetrics, CtrlkitManager, CtrlkitManagerTraced1, CtrlkitManagerTraced100} {
		b.Run(side, func(b *testing.B) {
			for b.Loop() {
				res, err := s.Run(b.Context(), side)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res["events_per_sec"], "events/s")
				b.ReportMetric(res["allocs_per_event"+net], "allocs/event"+net)
				b.ReportMetric(res["cpu_us_per_event"+net], "µs-cpu/event"+net)
				b.ReportMetric(res["gc_cpu_us_per_event"], "µs-gc/event")
				b.ReportMetric(res["gc_cycles"], "gcs")
				b.ReportMetric(res["sync_cpu_ms"], "sync-cpu-ms")
				b.ReportMetric(res["live_heap_mb"], "live-MB")
			}
		})
	}
}

func profileEvents(b *testing.B, prefix string) func() {
	b.Helper()
	writeHeap := func(name string) {
		runtime.GC() // the allocs profile is published at the end of a GC cycle
		f, err := os.Create(prefix + name)
		if err == nil {
			err = errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		if err != nil {
			b.Error(err)
		}
	}
	writeHeap(".heap.start")
	cpu, err := os.Create(prefix + ".cpu")
	if err == nil {
		err = pprof.StartCPUProfile(cpu)
	}
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			b.Error(err)
		}
		writeHeap(".heap.end")
	}
}

func TestFair_everySideHandsOutEveryKeyOnce(t *testing.T) {
	cfg := FairConfig{Backlog: 2000, Stream: 20 * time.Millisecond, Work: time.Microsecond}
	for _, s := range []Scenario{NoisyNeighbour(cfg), Startup(cfg)} {
		for _, side := range []string{Ctrlkit, ClientGo, ControllerRuntime} {
			res, err := s.Run(t.Context(), side)
			if err != nil {
				t.Fatalf("%s, %s: %v", s.Name, side, err)
			}
			if m := s.Metrics; res[m[1].Name] < res[m[0].Name] {
				t.Errorf("%s, %s: p99 below p50: %v", s.Name, side, res)
			}
		}
	}
}

// S9 on every side: every quiet key handed out once, and on ctrlkit's
// queue (flows by cluster) the quiet cluster's keys are not handed out
// behind the noisy cluster's backlog: its p50 beside the noise stays under
// a backlog's worth of reconciles.
func TestNoisyCluster_everySideHandsOutEveryKeyOnce(t *testing.T) {
	cfg := ClusterFairConfig{Stream: 100 * time.Millisecond, Every: 5 * time.Millisecond, Noise: 100, Workers: 2, Work: 200 * time.Microsecond}
	s := NoisyCluster(cfg)
	for _, side := range []string{Ctrlkit, ClientGo, ControllerRuntime, Floor} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if res["quiet_p99_us"] < res["quiet_p50_us"] {
			t.Errorf("%s: p99 below p50: %v", side, res)
		}
		// The backlog: 2,000 noisy keys in 100 ms, more than 2 workers of
		// 200 µs reconciles take (it drains ~250 ms later); a fair queue
		// hands a quiet key out within a reconcile or two.
		if (side == Ctrlkit || side == Floor) && res["quiet_p50_us"] > 10_000 {
			t.Errorf("%s: the quiet cluster's p50 %v µs beside the noisy one: handed out behind its backlog", side, res["quiet_p50_us"])
		}
	}
}

func TestMarkdown_addsARowPerExtraSide(t *testing.T) {
	s := Scenario{Name: "fake", Metrics: []Metric{{Name: "t", Unit: "ms", Better: "lower"}}, Extra: []string{ControllerRuntime},
		Run: func(_ context.Context, side string) (Result, error) {
			return Result{"t": map[string]float64{Ctrlkit: 1, ClientGo: 40, ControllerRuntime: 20}[side]}, nil
		}}
	table := markdownOf(t, s)
	if !strings.Contains(table, "| fake, vs controller-runtime | t (ms, lower is better) | 1.00 (1.00–1.00) | 20.00 (20.00–20.00) | 0.0500 |") {
		t.Errorf("table:\n%s", table)
	}
}

// markdownOf runs one round of s and returns its table.
func markdownOf(t *testing.T, s Scenario) string {
	t.Helper()
	sum, err := Run(t.Context(), s, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := Markdown(&b, []Summary{sum}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMarkdown_aRatioOfANegativeNetFigureIsNA(t *testing.T) {
	s := Scenario{Name: "fake", Metrics: []Metric{{Name: "allocs_net", Unit: "allocs", Better: "lower"}}, Extra: []string{Floor},
		Run: func(_ context.Context, side string) (Result, error) {
			return Result{"allocs_net": map[string]float64{Ctrlkit: 1.2, ClientGo: 11, Floor: -0.0002}[side]}, nil
		}}
	table := markdownOf(t, s)
	if !strings.Contains(table, "| fake, vs floor | allocs_net (allocs, lower is better) | 1.20 (1.20–1.20) | -0.0002 (-0.0002–-0.0002) | n/a |") ||
		!strings.Contains(table, "| fake | allocs_net (allocs, lower is better) | 1.20 (1.20–1.20) | 11.00 (11.00–11.00) | 0.11 |") {
		t.Errorf("table:\n%s", table)
	}
}

func TestLean_everySideCachesTheRecordedPodsAndEvents(t *testing.T) {
	leakcheck.Check(t)
	srv := apiserver.StartForTest(t, apiserver.Options{})
	rec, err := RecordLean(t.Context(), srv.Config(), LeanConfig{Pods: 600, Updates: 400, Namespaces: 7, PageSize: 250, Progress: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Pages) != 3 || rec.Events != 400 || len(rec.Frames) == 0 {
		t.Fatalf("recorded %d pages and %d events (%d bytes); want 3 pages, 400 events", len(rec.Pages), rec.Events, len(rec.Frames))
	}
	s := Lean(rec)
	results := map[string]Result{}
	for _, side := range []string{Ctrlkit, ClientGo, ClientGoTransform} {
		res, err := s.Run(t.Context(), side)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if res["bytes_per_object"] <= 0 || res["list_peak_mb"] <= 0 || res["cpu_us_per_event"] <= 0 {
			t.Errorf("%s: implausible result %v", side, res)
		}
		results[side] = res
		t.Logf("%s: %v", side, res)
	}
	if _, err := s.Run(t.Context(), "nobody"); err == nil {
		t.Error("an unknown side ran")
	}
	if r := results[Ctrlkit]; r["bytes_per_object_interned"] >= r["bytes_per_object"] {
		t.Errorf("interning did not shrink ctrlkit's projections: %v", r)
	}
	// Whole Pods cost more than trimmed ones.
	if !(results[ClientGo]["bytes_per_object"] > results[ClientGoTransform]["bytes_per_object"]) {
		t.Errorf("client-go's whole Pods (%v B) are not larger than its trimmed ones (%v B)",
			results[ClientGo]["bytes_per_object"], results[ClientGoTransform]["bytes_per_object"])
	}
}

func TestLean_aARowRerunsCtrlkit(t *testing.T) {
	var order []string
	s := Scenario{Name: "fake", Metrics: []Metric{{Name: "t", Unit: "ms", Better: "lower"}}, AAOf: Ctrlkit, Extra: []string{"x"},
		Run: func(_ context.Context, side string) (Result, error) {
			order = append(order, side)
			return Result{"t": map[string]float64{Ctrlkit: 10, ClientGo: 40, "x": 20}[side]}, nil
		}}
	sum, err := Run(t.Context(), s, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "ctrlkit,client-go,ctrlkit,x" {
		t.Errorf("order = %s; want the A/A run to be ctrlkit's", got)
	}
	if r, aa := sum.Ratio("t"); r != 0.25 || aa != 1 {
		t.Errorf("ratio %v (want 10/40), A/A %v (want 10/10)", r, aa)
	}
	if len(sum.Runs[AACtrlkit]) != 1 || len(sum.Runs[AA]) != 0 {
		t.Errorf("runs kept as %v; want the A/A run under %q", sum.Runs, AACtrlkit)
	}
}
