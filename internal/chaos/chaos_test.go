package chaos_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

var (
	duration = flag.Duration("chaos.duration", shortDrive, "drive writes and faults for at least this long (make chaos: the long form)")
	seedFlag = flag.Uint64("chaos.seed", 0, "seed of every random choice (0: a new one, logged)")
)

const (
	names    = 2000   // the key space of the driver
	writers  = 8      // concurrent writers
	minOps   = 20_000 // operations in the short form (and at least in the long one)
	failRate = 0.05   // reconciles that fail
	// shortDrive is how long the short form (make test) drives at least:
	// with the server's start and the convergence, about three minutes under
	// -race on two cores. minOps and the plan of faults alone take about 70s.
	shortDrive = 150 * time.Second
	// driveLimit bounds the driving phase beyond -chaos.duration, for when
	// minOps or the plan of faults take longer than it.
	driveLimit = 5 * time.Minute
	settle     = 3 * time.Minute // bound on convergence once driving stopped
)

// Under random writes, API server restarts, etcd compactions, connection
// cuts and stalls, a slow handler, a panicking handler and a failing
// reconciler, the informer and the controller end exactly where the server
// is, and see every delete.
func TestChaos(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	begin := time.Now()

	srv, err := apiserver.Start(t.Context(), apiserver.Options{}) // watch cache on: a restart makes old RVs 410
	if err != nil {
		t.Fatal(err)
	}
	ns := srv.Namespace(t)
	leakcheck.Check(t) // after the server's goroutines; it checks after every cleanup below
	t.Cleanup(func() { // registered before the informer and controller start: runs after they stopped
		if err := srv.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	direct, proxied := apiserver.Client(t, srv.Config()).CoreV1().ConfigMaps(ns), apiserver.Client(t, p.Config()).CoreV1().ConfigMaps(ns)

	pl := startPipeline(t, proxied, seed)

	d := newDriver(direct, names, writers, seed)
	f := newFaults(srv, p, seed)
	lag := &lagSampler{reg: pl.reg}
	sampling, stopSampling := context.WithCancel(t.Context())
	var sampler sync.WaitGroup
	sampler.Go(func() { lag.run(sampling) })
	defer func() { stopSampling(); sampler.Wait() }()
	drove := drive(t, d, f)

	settleStart := time.Now()
	_, deletedByDriver := d.summary()
	waitFor(t, settle, "convergence", func() []string {
		server, err := list(t, direct)
		if err != nil {
			return []string{"list: " + err.Error()}
		}
		return problems(ns, server, pl.views, pl.rec, deletedByDriver)
	})
	settled := time.Since(settleStart)
	stopSampling()
	sampler.Wait()

	for _, v := range pl.views {
		for _, e := range v.violationList() {
			t.Errorf("%s: %s", v.name, e)
		}
	}
	panicky := pl.views[1]
	if got, want := sumMetric(t, pl.reg, "ctrlkit_informer_handler_panics_total", panicky.name), float64(panicky.panicCount()); got != want || want == 0 {
		t.Errorf("panics recovered (metric) = %v, panics thrown = %v; want equal and positive", got, want)
	}
	logSummary(t, summaryInput{d: d, f: f, reg: pl.reg, views: pl.views, rec: pl.rec, lag: lag,
		total: time.Since(begin), drove: drove, settled: settled})
}

// pipeline is what the test checks: an informer with three handlers
// (slow, panicky, plain) and a controller whose reconciler records what it
// read from the informer's cache.
type pipeline struct {
	reg   *prometheus.Registry
	views []*view
	rec   *recorder
}

// startPipeline runs the informer over cms and the controller until the test
// ends, and returns once the informer has synced.
func startPipeline(t *testing.T, cms typedcorev1.ConfigMapInterface, seed uint64) *pipeline {
	t.Helper()
	pl := &pipeline{reg: prometheus.NewRegistry(), views: []*view{
		newView("slow", 2*time.Millisecond, 0, seed),
		newView("panicky", 0, 0.01, seed),
		newView("plain", 0, 0, seed),
	}}
	inf, err := informer.New(listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{}),
		informer.Options[*corev1.ConfigMap]{Name: "configmaps", FactoryOptions: informer.FactoryOptions{Telemetry: telemetry.Telemetry{Registerer: pl.reg}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range pl.views {
		if _, err := inf.AddEventHandler(v, informer.HandlerOptions{Name: v.name}); err != nil {
			t.Fatal(err)
		}
	}
	pl.rec = newRecorder(inf.Reader(), failRate, seed)
	// Retries back off per key only. The default limiter also caps all
	// retries at 10 per second; 5% of this workload's reconciles fail at about
	// 14 per second, so its debt would grow with the run (30s after the short
	// form) and the long form would measure the cap, not convergence.
	limiter := workqueue.NewItemExponential[string](5*time.Millisecond, 10*time.Second)
	ctrl, err := controller.New[string](pl.rec, controller.Options[string]{Name: "chaos", Workers: 2, RateLimiter: limiter})
	if err != nil {
		t.Fatal(err)
	}
	enqueue, err := inf.AddEventHandler(handler.EnqueueKey[*corev1.ConfigMap](ctrl, nil), informer.HandlerOptions{Name: "enqueue"})
	if err != nil {
		t.Fatal(err)
	}
	ctrl.WaitFor("configmaps", enqueue.HasSynced, inf.LastError)
	background(t, "informer", inf.Run)
	background(t, "controller", ctrl.Run)
	waitFor(t, time.Minute, "the informer to sync", func() []string { return unless(enqueue.HasSynced(), "not synced") })
	return pl
}

// drive runs the driver and the faults until -chaos.duration has passed, the
// driver has made minOps operations and the plan of faults is done; then it
// stops both, waits for them and returns how long they ran.
func drive(t *testing.T, d *driver, f *faults) time.Duration {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }() // also when waitFor fails
	wg.Go(func() { d.run(ctx, t) })
	wg.Go(func() { f.run(ctx, t) })
	start := time.Now()
	waitFor(t, *duration+driveLimit, "the driving phase to end", func() []string {
		_, planDone := f.summary()
		return slices.Concat(
			unless(time.Since(start) >= *duration, "duration not reached"),
			unless(d.ops.Load() >= minOps, "too few operations"),
			unless(planDone, "faults of the plan not done"))
	})
	stop()
	wg.Wait()
	return time.Since(start)
}

// background runs f until the test ends; the cleanup cancels it, waits for it
// to return and checks that it returned nil.
func background(t *testing.T, name string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("%s: Run did not return a minute after cancel", name)
		}
	})
}
