package debug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// bigSource is a pipeline as a manager wires it: an informer over n
// ConfigMaps, whose handler queues every key in a controller that does not
// run, so its queue holds n keys too.
type bigSource struct {
	inf  *informer.SharedIndexInformer[*corev1.ConfigMap]
	ctrl *controller.Controller[object.ObjectName]
}

func (s bigSource) State() debug.State {
	now := time.Now()
	return debug.State{Time: now,
		Informers:   []debug.Informer{debug.FromInformer(s.inf.Stats(), s.inf.LastError(), now)},
		Controllers: []debug.Controller{debug.FromController(s.ctrl.Stats(), "", now)}}
}

func (s bigSource) Explain(name, raw string) (debug.Explanation, error) {
	key, err := object.ParseObjectName(raw)
	if err != nil {
		return debug.Explanation{}, fmt.Errorf("%w: %v", debug.ErrMalformedKey, err)
	}
	return debug.Explain(name, key, key, s.ctrl.KeyStats(key), s.inf, time.Now()), nil
}

// configMaps returns n ConfigMaps of about 400 bytes each.
func configMaps(n int) *corev1.ConfigMapList {
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(n + 1)}}
	l.Items = make([]corev1.ConfigMap, n)
	for i := range l.Items {
		l.Items[i] = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("cm-%06d", i),
				ResourceVersion: strconv.Itoa(i + 1), Labels: map[string]string{"app": "web", "tier": strconv.Itoa(i % 3)}},
			Data: map[string]string{"config.yaml": fmt.Sprintf("replicas: %d\nimage: registry.example/web:v1.2.3\nlog: info\n", i%7),
				"owner": "team-" + strconv.Itoa(i%13)},
		}
	}
	return l
}

// startBig runs a bigSource over n objects until the test ends and returns
// it once the cache holds them all and the queue holds every key.
func startBig(tb testing.TB, n int) bigSource {
	tb.Helper()
	list := configMaps(n)
	lw := listwatch.New[*corev1.ConfigMap](
		func(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) { return list, nil },
		func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		listwatch.Options{})
	inf, err := informer.New(lw, informer.Options[*corev1.ConfigMap]{Name: "configmaps/v1",
		FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}}})
	if err != nil {
		tb.Fatal(err)
	}
	ctrl, err := controller.New[object.ObjectName](controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
		controller.Options[object.ObjectName]{Name: "big", Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ctrl.Queue().ShutDown)
	reg, err := inf.AddEventHandler(handler.EnqueueObject[*corev1.ConfigMap](ctrl), informer.HandlerOptions{Name: "big"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(tb.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for !reg.HasSynced() {
		if time.Now().After(deadline) {
			tb.Fatalf("the informer did not hand out %d objects within 2m", n)
		}
		time.Sleep(10 * time.Millisecond) // polling a large initial list, not synchronising
	}
	if got := ctrl.Queue().Len(); got != n {
		tb.Fatalf("queue holds %d keys, want %d", got, n)
	}
	return bigSource{inf: inf, ctrl: ctrl}
}

// getState fetches state.json from url and decodes it.
func getState(tb testing.TB, url string) debug.State {
	tb.Helper()
	resp, err := http.Get(url + debug.Path + "/state.json")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("state.json: %d %v %s", resp.StatusCode, err, body)
	}
	var st debug.State
	if err := json.Unmarshal(body, &st); err != nil {
		tb.Fatal(err)
	}
	return st
}

const bigN = 100_000

func TestStateJSON_answersQuicklyWith100kCachedObjects(t *testing.T) {
	leakcheck.Check(t)
	src := startBig(t, bigN)
	srv := httptest.NewServer(debug.New(src, debug.Options{}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	getState(t, srv.URL) // warm the connection
	var worst time.Duration
	for range 5 {
		start := time.Now()
		st := getState(t, srv.URL)
		worst = max(worst, time.Since(start))
		if st.Informers[0].Objects != bigN || st.Controllers[0].Queue.Depth != bigN {
			t.Fatalf("state.json shows %d objects and depth %d, want %d", st.Informers[0].Objects, st.Controllers[0].Queue.Depth, bigN)
		}
		if b := st.Informers[0].ApproxBytes; b < bigN*100 || b > bigN*2000 {
			t.Errorf("approxBytes %d: not plausible for %d ConfigMaps of about 300 bytes", b, bigN)
		}
	}
	t.Logf("state.json with %d cached objects and %d queued keys: slowest of 5 requests %s", bigN, bigN, worst)
	if worst > 500*time.Millisecond {
		t.Errorf("state.json took %s with %d cached objects; want well under a second", worst, bigN)
	}
	start := time.Now()
	e, _ := src.Explain("big", fmt.Sprintf("ns-99/cm-%06d", bigN-1))
	t.Logf("explain of the last queued key: %s (%s)", time.Since(start), e.Summary)
	if !e.Queued || e.Position != bigN-1 || !e.Cached {
		t.Errorf("explain = %+v", e)
	}
}

func BenchmarkStateJSON_100kCachedObjects(b *testing.B) {
	src := startBig(b, bigN)
	srv := httptest.NewServer(debug.New(src, debug.Options{}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for b.Loop() {
		getState(b, srv.URL)
	}
}
