package manager_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// families gathers m's registry (what /metrics serves) by family name.
func families(t *testing.T, m *manager.Manager) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// series returns the series of family name whose labels include match.
func series(fams map[string]*dto.MetricFamily, name string, match map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		l := labelsOf(m)
		if !slices.ContainsFunc(slices.Collect(maps.Keys(match)), func(k string) bool { return l[k] != match[k] }) {
			out = append(out, m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
}

// sumOf adds up the values of the matching series.
func sumOf(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var s float64
	for _, m := range series(fams, name, match) {
		s += value(m)
	}
	return s
}

func upperBounds(m *dto.Metric) []float64 {
	var out []float64
	for _, b := range m.GetHistogram().GetBucket() {
		out = append(out, b.GetUpperBound())
	}
	return out
}

// Each kind of reconcile result on the real server, then every series a
// controller-runtime dashboard reads, by name, type, label names and value.
func TestManager_metricsCarryControllerRuntimesNamesAndLabels(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	var mu sync.Mutex
	attempts := map[string]int{}
	rec := controller.ReconcileFunc[object.ObjectName](func(_ context.Context, key object.ObjectName) (controller.Result, error) {
		mu.Lock()
		attempts[key.Name]++
		n := attempts[key.Name]
		mu.Unlock()
		switch {
		case key.Name == "later":
			return controller.Result{RequeueAfter: time.Hour}, nil
		case key.Name == "terminal":
			return controller.Result{}, controller.Terminal(errors.New("bad spec"))
		case key.Name == "fail" && n == 1:
			return controller.Result{}, errors.New("flaky")
		case key.Name == "panic" && n == 1:
			panic("boom")
		}
		return controller.Result{}, nil
	})
	for _, name := range []string{"ok", "later", "terminal", "fail", "panic"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	co := manager.ControllerOptions{}
	co.Workers = 2
	if _, err := manager.NewController(m, "results", rec, co, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	if _, err := m.Kube().CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl := map[string]string{"controller": "results"}
	// Created before the start, each ConfigMap is listed once: 5 first
	// reconciles and the retries of "fail" and "panic".
	eventually(t, 30*time.Second, "7 reconciles", func() bool {
		return sumOf(families(t, m), "controller_runtime_reconcile_total", ctrl) == 7
	})
	fams := families(t, m)

	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels []string // label names, sorted
		match  map[string]string
		want   float64 // the matching series' sum; -1: any
	}{
		{"controller_runtime_reconcile_total", dto.MetricType_COUNTER, []string{"controller", "result"}, map[string]string{"controller": "results", "result": "success"}, 3},
		{"controller_runtime_reconcile_total", dto.MetricType_COUNTER, []string{"controller", "result"}, map[string]string{"controller": "results", "result": "error"}, 3},
		{"controller_runtime_reconcile_total", dto.MetricType_COUNTER, []string{"controller", "result"}, map[string]string{"controller": "results", "result": "requeue_after"}, 1},
		{"controller_runtime_reconcile_total", dto.MetricType_COUNTER, []string{"controller", "result"}, map[string]string{"controller": "results", "result": "requeue"}, 0},
		{"controller_runtime_reconcile_errors_total", dto.MetricType_COUNTER, []string{"controller"}, ctrl, 3},
		{"controller_runtime_terminal_reconcile_errors_total", dto.MetricType_COUNTER, []string{"controller"}, ctrl, 1},
		{"controller_runtime_reconcile_panics_total", dto.MetricType_COUNTER, []string{"controller"}, ctrl, 1},
		{"controller_runtime_reconcile_timeouts_total", dto.MetricType_COUNTER, []string{"controller"}, ctrl, 0},
		{"controller_runtime_reconcile_time_seconds", dto.MetricType_HISTOGRAM, []string{"controller"}, ctrl, 7},
		{"controller_runtime_active_workers", dto.MetricType_GAUGE, []string{"controller"}, ctrl, -1},
		{"controller_runtime_max_concurrent_reconciles", dto.MetricType_GAUGE, []string{"controller"}, ctrl, 2},
		{"ctrlkit_controller_dropped_keys_total", dto.MetricType_COUNTER, []string{"controller", "reason"}, ctrl, 0},
		{"ctrlkit_controller_gate_holds_total", dto.MetricType_COUNTER, []string{"controller"}, ctrl, 0},
		{"workqueue_depth", dto.MetricType_GAUGE, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, -1},
		{"workqueue_adds_total", dto.MetricType_COUNTER, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, -1},
		{"workqueue_queue_duration_seconds", dto.MetricType_HISTOGRAM, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, 7},
		{"workqueue_work_duration_seconds", dto.MetricType_HISTOGRAM, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, 7},
		{"workqueue_unfinished_work_seconds", dto.MetricType_GAUGE, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, -1},
		{"workqueue_longest_running_processor_seconds", dto.MetricType_GAUGE, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, -1},
		// The retries of "fail" and "panic", and "later"'s RequeueAfter (as
		// controller-runtime counts them).
		{"workqueue_retries_total", dto.MetricType_COUNTER, []string{"controller", "name"}, map[string]string{"controller": "results", "name": "results"}, 3},
	} {
		t.Run(fmt.Sprintf("%s%v", tc.name, tc.match), func(t *testing.T) {
			mf := fams[tc.name]
			if mf == nil {
				t.Fatalf("no %s on the registry", tc.name)
			}
			if mf.GetType() != tc.typ {
				t.Errorf("type %v, want %v", mf.GetType(), tc.typ)
			}
			ss := series(fams, tc.name, tc.match)
			if len(ss) == 0 {
				t.Fatalf("no series with %v", tc.match)
			}
			for _, s := range ss {
				if got := slices.Sorted(maps.Keys(labelsOf(s))); !slices.Equal(got, tc.labels) {
					t.Errorf("labels %v, want %v", got, tc.labels)
				}
			}
			if got := sumOf(fams, tc.name, tc.match); tc.want >= 0 && got != tc.want {
				t.Errorf("value %v, want %v", got, tc.want)
			}
		})
	}
	if got := sumOf(fams, "workqueue_adds_total", map[string]string{"name": "results"}); got < 5 {
		t.Errorf("workqueue_adds_total = %v, want at least the 5 listed keys", got)
	}

	// controller-runtime's buckets, so its dashboards' quantiles read the same.
	reconcileBuckets := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1,
		1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}
	if got := upperBounds(series(fams, "controller_runtime_reconcile_time_seconds", ctrl)[0]); !slices.Equal(got, reconcileBuckets) {
		t.Errorf("reconcile time buckets %v, want %v", got, reconcileBuckets)
	}
	queueBuckets := []float64{1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000}
	for _, name := range []string{"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"} {
		got := upperBounds(series(fams, name, ctrl)[0])
		if !slices.EqualFunc(got, queueBuckets, func(a, b float64) bool { return a/b > 0.999999 && a/b < 1.000001 }) {
			t.Errorf("%s buckets %v, want %v", name, got, queueBuckets)
		}
	}

	// client-go's REST client series: the list above is one of the
	// requests, to the test server's host.
	u, err := url.Parse(srv.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		match  map[string]string
		labels []string
	}{
		{"rest_client_requests_total", map[string]string{"code": "200", "method": "GET", "host": u.Host}, []string{"code", "host", "method"}},
		{"rest_client_request_duration_seconds", map[string]string{"verb": "GET", "host": u.Host}, []string{"host", "verb"}},
	} {
		ss := series(fams, tc.name, tc.match)
		if len(ss) == 0 || sumOf(fams, tc.name, tc.match) == 0 {
			t.Errorf("%s%v: no requests counted", tc.name, tc.match)
			continue
		}
		if got := slices.Sorted(maps.Keys(labelsOf(ss[0]))); !slices.Equal(got, tc.labels) {
			t.Errorf("%s labels %v, want %v", tc.name, got, tc.labels)
		}
	}
}

// The REST client series are process-wide: a second manager (its own
// registry) shows them too, and sees a list made by any client. With a
// client-side rate limit, the wait for it is measured.
func TestManager_restClientMetricsOnEveryManagersRegistry(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	limited := srv.Config()
	limited.QPS, limited.Burst = 1000, 1000
	a, err := manager.New(limited, quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	match := map[string]string{"code": "200", "method": "GET", "host": u.Host}
	before := sumOf(families(t, b), "rest_client_requests_total", match)
	if _, err := a.Kube().CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*manager.Manager{"a": a, "b": b} {
		if got := sumOf(families(t, m), "rest_client_requests_total", match); got < before+1 {
			t.Errorf("manager %s: rest_client_requests_total%v = %v after a list, want at least %v", name, match, got, before+1)
		}
		limiter := map[string]string{"verb": "GET", "host": u.Host}
		if got := sumOf(families(t, m), "rest_client_rate_limiter_duration_seconds", limiter); got == 0 {
			t.Errorf("manager %s: no rest_client_rate_limiter_duration_seconds%v after a rate-limited list", name, limiter)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// klog's output (client-go's leader election, warnings) reaches the
// running manager's logger, and no longer once its Run returned.
func TestManager_klogGoesToTheRunningManagersLogger(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	var buf syncBuffer
	opts := quiet(t)
	opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	base := "http://" + m.Addr(ctx)
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	klog.InfoS("from klog while running", "k", "v")
	klog.ErrorS(errors.New("oops"), "klog error while running")
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	klog.InfoS("from klog after Run")
	out := buf.String()
	for _, want := range []string{`level=INFO msg="from klog while running" k=v`, `level=ERROR msg="klog error while running" err=oops`} {
		if !strings.Contains(out, want) {
			t.Errorf("manager log has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "after Run") {
		t.Errorf("a klog line written after Run returned reached the manager's logger:\n%s", out)
	}
}

// ctrlkit_controller_writes_total counts the writes a controller's
// reconciles send, by verb: a reconcile that finds everything as wanted
// (here, an apply the cache already holds) counts none, whatever else the
// process sends.
func TestManager_countsEachControllersWrites(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	opts := quiet(t)
	opts.Informers.KeepManagedFieldsOf = []string{"writer"}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns, LabelSelector: "role=source"})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	var reconciles atomic.Int64
	if _, err := manager.NewController(m, "writer", controller.ReconcileFunc[object.ObjectName](
		func(ctx context.Context, n object.ObjectName) (controller.Result, error) {
			defer reconciles.Add(1)
			cm, ok := cms.Reader().Get(n)
			if !ok {
				return controller.Result{}, nil
			}
			s := corev1ac.Secret(n.Name, n.Namespace).WithData(map[string][]byte{"k": []byte(cm.Data["k"])}).
				WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
			_, _, err := apply.Apply(ctx, m.Kube().CoreV1().Secrets(n.Namespace), secrets.Reader(), s,
				metav1.ApplyOptions{FieldManager: "writer", Force: true})
			return controller.Result{}, err
		}), manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	writes := func(verb string) float64 {
		t.Helper()
		for _, mt := range families(t, m)["ctrlkit_controller_writes_total"].GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == "writer" && labels["verb"] == verb {
				return mt.GetCounter().GetValue()
			}
		}
		return 0
	}
	kube := apiserver.Client(t, srv.Config())
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a",
		Labels: map[string]string{"role": "source"}}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Secret applied once", func() bool { return writes("apply") == 1 })
	// An update the Secret does not depend on: reconciled, nothing written.
	before := reconciles.Load()
	cm.Annotations = map[string]string{"touched": "yes"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the touched ConfigMap reconciled", func() bool { return reconciles.Load() > before })
	if got := writes("apply"); got != 1 {
		t.Errorf("writes{controller=writer,verb=apply} = %v after a reconcile that changes nothing; want still 1", got)
	}
}
