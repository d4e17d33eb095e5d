package workqueue

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metric gathers reg and returns the metric family's sample labelled with
// queue, or nil if there is none.
func metric(t *testing.T, reg *prometheus.Registry, family, queue string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == queue {
					return m
				}
			}
		}
	}
	return nil
}

// value returns a counter's or gauge's value, or a histogram's sum.
func value(t *testing.T, reg *prometheus.Registry, family, queue string) float64 {
	t.Helper()
	m := metric(t, reg, family, queue)
	switch {
	case m == nil:
		t.Fatalf("no %s{name=%q} in the registry", family, queue)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return m.Histogram.GetSampleSum()
	}
	t.Fatalf("%s{name=%q} has an unexpected type", family, queue)
	return 0
}

// metricsQueue returns a queue called name with metrics in a registry of
// its own and a fake clock, and a check of one of its series' value.
func metricsQueue(t *testing.T, name string) (*Queue[string], *fakeClock, func(family string, v float64)) {
	reg := prometheus.NewRegistry()
	clk := newFakeClock()
	q := newTestQueue(t, Options[string]{Name: name, Registerer: reg, Clock: clk})
	return q, clk, func(family string, v float64) {
		t.Helper()
		if got := value(t, reg, family, name); got != v {
			t.Errorf("%s = %v, want %v", family, got, v)
		}
	}
}

func TestQueue_Metrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, clk, want := metricsQueue(t, "pods")
		q.Add("a")
		q.Add("a")
		q.Add("b")
		want("workqueue_adds_total", 2)
		want("workqueue_depth", 2)
		clk.step(3 * time.Second)
		get("a")(t, q)
		want("workqueue_queue_duration_seconds", 3)
		want("workqueue_depth", 1)
		q.Add("a") // re-added while processing: waiting again, though not queued until Done
		want("workqueue_depth", 2)
		if q.Len() != 1 {
			t.Errorf("Len() = %d with b queued and a re-added, want 1", q.Len())
		}
		clk.step(2 * time.Second)
		get("b")(t, q)
		clk.step(time.Second)
		want("workqueue_unfinished_work_seconds", 3+1)
		want("workqueue_longest_running_processor_seconds", 3)
		done("a")(t, q)
		want("workqueue_work_duration_seconds", 3)
		want("workqueue_longest_running_processor_seconds", 1)
		q.AddRateLimited("a")
		q.AddRateLimited("c")
		want("workqueue_retries_total", 2)
		// Delayed adds are retries too, as in client-go and
		// controller-runtime; a plain add is not.
		q.AddAfter("d", time.Second)
		q.AddAfter("e", 0)
		q.AddWithOpts("f", AddOpts{After: time.Second})
		q.AddWithOpts("g", AddOpts{Priority: 1})
		want("workqueue_retries_total", 5)
	})
}

// TestQueue_MetricsCountNoRetryWhileShuttingDown: while a drain waits for
// a handed-out key, delayed and rate-limited adds are refused and count no
// retry, as client-go's AddAfter returns before counting once shutting
// down (the series are still registered then: ShutDown's unregister comes
// when the drain ends).
func TestQueue_MetricsCountNoRetryWhileShuttingDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, _, want := metricsQueue(t, "draining")
		q.Add("held")
		get("held")(t, q)
		q.AddRateLimited("before")
		want("workqueue_retries_total", 1)
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(t.Context()) }()
		synctest.Wait()
		if !q.ShuttingDown() {
			t.Fatal("ShuttingDown() = false during ShutDownWithDrain")
		}
		q.AddAfter("x", time.Second)
		q.AddAfter("y", 0)
		q.AddRateLimited("z")
		q.AddWithOpts("w", AddOpts{After: time.Second})
		want("workqueue_retries_total", 1)
		if q.Len() != 0 {
			t.Errorf("Len() = %d after adds during the drain, want 0", q.Len())
		}
		done("held")(t, q)
		if err := <-drained; err != nil {
			t.Errorf("ShutDownWithDrain = %v, want nil once the held key is Done", err)
		}
	})
}

// TestQueue_MetricsTimeAWaitFromWhenTheKeyBecameDirty: a key's queue
// duration counts from its first add, through a move to a higher band, and
// a key added again while processed counts from that add, through its
// requeue at Done.
func TestQueue_MetricsTimeAWaitFromWhenTheKeyBecameDirty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		clk := newFakeClock()
		q := newTestQueue(t, Options[string]{Name: "q", Registerer: reg, Clock: clk})
		waited := func(want float64) {
			t.Helper()
			if got := value(t, reg, "workqueue_queue_duration_seconds", "q"); got != want {
				t.Errorf("queue durations sum to %vs, want %vs", got, want)
			}
		}
		t0 := clk.Now()
		q.Add("a")
		clk.step(2 * time.Second)
		q.AddWithPriority("a", 5) // moves up a band, still dirty since t0
		if st := q.State("a"); !st.Queued || !st.Since.Equal(t0) {
			t.Errorf("State(a) = %+v, want queued since t0", st)
		}
		clk.step(time.Second)
		get("a")(t, q)
		waited(3)
		q.Add("a") // dirty again at t0+3s, queued at Done
		clk.step(4 * time.Second)
		done("a")(t, q)
		if st := q.State("a"); !st.Queued || !st.Since.Equal(t0.Add(3*time.Second)) {
			t.Errorf("State(a) = %+v, want queued since t0+3s", st)
		}
		clk.step(time.Second)
		get("a")(t, q)
		waited(3 + 5)
	})
}

func TestQueue_MetricsTimeAKeyFromWhenGetHandsItOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		clk := newFakeClock()
		q := newTestQueue(t, Options[string]{Name: "q", Registerer: reg, Clock: clk})
		got := make(chan string)
		go func() {
			k, _ := q.Get() // blocks for 10s of the fake clock
			got <- k
		}()
		synctest.Wait()
		clk.step(10 * time.Second)
		q.Add("a")
		<-got
		clk.step(time.Second)
		if v := value(t, reg, "workqueue_longest_running_processor_seconds", "q"); v != 1 {
			t.Fatalf("longest running = %vs, want 1s: the time Get waited is not work", v)
		}
		q.Done("a")
		if v := value(t, reg, "workqueue_work_duration_seconds", "q"); v != 1 {
			t.Fatalf("work duration = %vs, want 1s", v)
		}
	})
}

func TestQueue_MetricsOfTwoQueuesShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newTestQueue(t, Options[string]{Name: "a", Registerer: reg})
	b := newTestQueue(t, Options[string]{Name: "b", Registerer: reg})
	a.Add("x")
	b.Add("x")
	b.Add("y")
	if got := value(t, reg, "workqueue_depth", "a"); got != 1 {
		t.Errorf("depth{name=a} = %v, want 1", got)
	}
	if got := value(t, reg, "workqueue_depth", "b"); got != 2 {
		t.Errorf("depth{name=b} = %v, want 2", got)
	}
}

func TestNew_RejectsBadMetricsOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	newTestQueue(t, Options[string]{Name: "a", Registerer: reg})
	for _, tc := range []struct {
		name string
		opts Options[string]
	}{
		{"a second queue with the same name", Options[string]{Name: "a", Registerer: reg}},
		{"metrics without a name", Options[string]{Registerer: reg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if q, err := New(tc.opts); err == nil || q != nil {
				t.Fatalf("New = %v, %v; want an error", q, err)
			}
		})
	}
}

func TestQueue_ShutDownUnregistersItsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := newTestQueue(t, Options[string]{Name: "a", Registerer: reg})
	q.ShutDown()
	if m := metric(t, reg, "workqueue_depth", "a"); m != nil {
		t.Fatalf("depth{name=a} still registered after ShutDown: %v", m)
	}
	newTestQueue(t, Options[string]{Name: "a", Registerer: reg}) // the name is free again
}

func TestQueue_NoMetricsReadsNoClock(t *testing.T) {
	clk := newFakeClock()
	q := newTestQueue(t, Options[string]{Clock: clk})
	q.Add("a")
	get("a")(t, q)
	done("a")(t, q)
	if q.metrics != nil {
		t.Fatal("metrics set up without a registry")
	}
	if n := clk.nowCalls(); n != 0 {
		t.Fatalf("Add, Get and Done read the clock %d times with metrics off, want 0", n)
	}
}

// bandSamples gathers the band metric family and returns value by priority
// label for queue.
func bandSamples(t *testing.T, reg *prometheus.Registry, family, queue string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["name"] == queue {
				out[labels["priority"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestQueue_BandMetricsReportDepthAndOldestAgeWithCappedLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		q := newTestQueue(t, Options[string]{Name: "q", Registerer: reg})
		q.AddWithOpts("ns/low", AddOpts{Priority: LowPriority})
		time.Sleep(3 * time.Second)
		q.Add("ns/a")
		q.Add("ns/b")
		time.Sleep(time.Second)
		if got, want := fmt.Sprint(bandSamples(t, reg, "workqueue_band_depth", "q")), "map[-100:1 0:2]"; got != want {
			t.Errorf("band depth = %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(bandSamples(t, reg, "workqueue_band_oldest_seconds", "q")), "map[-100:4 0:1]"; got != want {
			t.Errorf("band oldest = %s, want %s", got, want)
		}
		for p := 1; p <= 10; p++ { // more priorities than labels
			q.AddWithOpts(fmt.Sprintf("ns/p%d", p), AddOpts{Priority: p})
		}
		depth := bandSamples(t, reg, "workqueue_band_depth", "q")
		if len(depth) != maxBandLabels || depth["other"] != 5 {
			t.Errorf("band depth = %v, want %d labels, 5 keys under \"other\"", depth, maxBandLabels)
		}
		for range 13 {
			k, _ := q.Get()
			q.Done(k)
		}
		depth = bandSamples(t, reg, "workqueue_band_depth", "q")
		if len(depth) != maxBandLabels || depth["0"] != 0 || depth["other"] != 0 {
			t.Errorf("band depth of an empty queue = %v, want every label kept at 0", depth)
		}
	})
}

// DoneAndGet times the key it finishes and the one it hands out as Done
// and Get do, and records the first before it waits for the second.
func TestQueue_MetricsOfDoneAndGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, clk, want := metricsQueue(t, "q")
		q.Add("a")
		q.Add("b")
		get("a")(t, q)
		clk.step(2 * time.Second)
		if k, _ := q.DoneAndGet("a"); k != "b" {
			t.Fatalf("DoneAndGet(a) = %q, want b", k)
		}
		want("workqueue_work_duration_seconds", 2)
		want("workqueue_queue_duration_seconds", 2)
		clk.step(time.Second)
		next := make(chan string)
		go func() {
			k, _ := q.DoneAndGet("b") // nothing queued: waits
			next <- k
		}()
		synctest.Wait()
		want("workqueue_work_duration_seconds", 2+1) // b's, recorded before the wait
		q.Add("c")
		if k := <-next; k != "c" {
			t.Fatalf("DoneAndGet(b) = %q, want c", k)
		}
		want("workqueue_depth", 0)
	})
}
