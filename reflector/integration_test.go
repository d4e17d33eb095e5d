package reflector_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

var env apiserver.Shared // watch cache on, as in production

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// counting wraps a ListerWatcher and counts its requests.
type counting[T object.Object] struct {
	reflector.ListerWatcher[T]
	lists, watches, watchLists atomic.Int32
}

func (c *counting[T]) List(ctx context.Context, o metav1.ListOptions) (reflector.List[T], error) {
	c.lists.Add(1)
	return c.ListerWatcher.List(ctx, o)
}

func (c *counting[T]) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	c.watches.Add(1)
	if o.SendInitialEvents != nil && *o.SendInitialEvents {
		c.watchLists.Add(1)
	}
	return c.ListerWatcher.Watch(ctx, o)
}

// syncs counts the requests that start a full synchronisation.
func (c *counting[T]) syncs() int32 { return c.lists.Load() + c.watchLists.Load() }

// store is a Sink keeping ConfigMap names, signalling each change.
type store struct {
	mu       sync.Mutex
	names    map[string]string // name -> resource version
	replaces int
	changed  chan struct{}
}

func newStore() *store { return &store{names: map[string]string{}, changed: make(chan struct{}, 1)} }

func (s *store) update(f func()) error {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}

func (s *store) Replace(items []*corev1.ConfigMap, _ string) error {
	return s.update(func() {
		s.names = map[string]string{}
		for _, it := range items {
			s.names[it.Name] = it.ResourceVersion
		}
		s.replaces++
	})
}
func (s *store) Add(o *corev1.ConfigMap) error {
	return s.update(func() { s.names[o.Name] = o.ResourceVersion })
}
func (s *store) Update(o *corev1.ConfigMap) error { return s.Add(o) }
func (s *store) Delete(o *corev1.ConfigMap) error {
	return s.update(func() { delete(s.names, o.Name) })
}
func (s *store) Bookmark(string) {}

func (s *store) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.names))
	for k, v := range s.names {
		out[k] = v
	}
	return out
}

// waitForServerState waits until the store holds exactly what the server has.
func (s *store) waitForServerState(t *testing.T, cms typedcorev1.ConfigMapInterface, d time.Duration) {
	t.Helper()
	list, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, cm := range list.Items {
		want[cm.Name] = cm.ResourceVersion
	}
	deadline := time.After(d)
	for {
		got := s.snapshot()
		if equal(got, want) {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("store has %d ConfigMaps, server %d; not equal after %s", len(got), len(want), d)
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func configMaps(t *testing.T, cfg *rest.Config, ns string) typedcorev1.ConfigMapInterface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoreV1().ConfigMaps(ns)
}

func createN(t *testing.T, cms typedcorev1.ConfigMapInterface, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i)}}
				if _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("create: %v", err)
	}
}

// start runs a reflector over ConfigMaps in ns until the test ends.
func start(t *testing.T, cfg *rest.Config, ns string, sink reflector.Sink[*corev1.ConfigMap], opts reflector.Options) (*reflector.Reflector[*corev1.ConfigMap], *counting[*corev1.ConfigMap]) {
	t.Helper()
	cms := configMaps(t, cfg, ns)
	lw := &counting[*corev1.ConfigMap]{ListerWatcher: listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})}
	r, err := reflector.New[*corev1.ConfigMap](lw, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, lw
}

func TestReflector_initialSyncOf5000ObjectsByWatchList(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "cm", 5000)
	leakcheck.Check(t)

	s := newStore()
	_, lw := start(t, srv.Config(), ns, s, reflector.Options{})
	s.waitForServerState(t, cms, time.Minute)
	if lw.lists.Load() != 0 || lw.watchLists.Load() != 1 {
		t.Errorf("%d lists and %d watch-list streams; want 0 and 1", lw.lists.Load(), lw.watchLists.Load())
	}
}

func TestReflector_initialSyncOf5000ObjectsByPaginatedList(t *testing.T) {
	// Without the watch cache, etcd serves the list and honours the page size.
	srv := apiserver.StartForTest(t, apiserver.Options{DisableWatchCache: true})
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "cm", 5000)
	leakcheck.Check(t)

	s := newStore()
	_, lw := start(t, srv.Config(), ns, s, reflector.Options{DisableWatchList: true})
	s.waitForServerState(t, cms, time.Minute)
	if got := lw.lists.Load(); got != 10 {
		t.Errorf("%d list requests, want 10 pages of 500", got)
	}
}

func TestReflector_resumesAfterAnAPIServerRestartWithoutRelisting(t *testing.T) {
	// Watch cache off: a restarted server's watch cache would answer 410 to
	// the pre-restart RV (see docs/design/001-real-apiserver.md).
	srv := apiserver.StartForTest(t, apiserver.Options{DisableWatchCache: true})
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "before", 20)

	s := newStore()
	_, lw := start(t, srv.Config(), ns, s, reflector.Options{DisableWatchList: true})
	s.waitForServerState(t, cms, 30*time.Second)
	syncs := lw.syncs()

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	createN(t, cms, "after", 20)
	s.waitForServerState(t, cms, time.Minute)
	if got := lw.syncs(); got != syncs {
		t.Errorf("sync requests went from %d to %d across the restart; want no relist", syncs, got)
	}
	if lw.watches.Load() < 2 {
		t.Errorf("%d watches; want a re-watch after the restart", lw.watches.Load())
	}
}

func TestReflector_relistsAfterCompactionMadeItsRVGone(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{DisableWatchCache: true})
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "old", 10)
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	s := newStore()
	var saw410 atomic.Bool
	reg := prometheus.NewRegistry()
	_, lw := start(t, p.Config(), ns, s, reflector.Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: reg},
		OnError: func(err error) {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				saw410.Store(true)
			}
		}})
	s.waitForServerState(t, cms, 30*time.Second)
	// An event through the watch first: a watch cut with no event in it
	// soon after it opened ends in a relist at once (a hot-loop guard),
	// without the re-watch whose 410 this test is about; under load the
	// stall could otherwise come that soon.
	createN(t, cms, "seen", 1)
	s.waitForServerState(t, cms, 30*time.Second)
	syncs := lw.syncs()

	// While the reflector hears nothing, objects change and history is compacted.
	p.Stall()
	if err := cms.Delete(t.Context(), "old-00003", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createN(t, cms, "new", 5)
	if _, err := srv.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	p.Resume()

	s.waitForServerState(t, cms, time.Minute)
	if !saw410.Load() {
		t.Error("the re-watch did not report 410 Gone")
	}
	if got := lw.syncs(); got <= syncs {
		t.Errorf("sync requests %d -> %d; want a relist", syncs, got)
	}
	if n := relists(t, reg); n < 1 {
		t.Errorf("relists metric = %v, want at least 1", n)
	}
}

func TestReflector_convergesThroughConnectionCuts(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := newStore()
	reg := prometheus.NewRegistry()
	_, lw := start(t, p.Config(), ns, s, reflector.Options{Telemetry: telemetry.Telemetry{Registerer: reg}})
	s.waitForServerState(t, cms, 30*time.Second)
	for round := range 5 {
		createN(t, cms, fmt.Sprintf("round%d", round), 20)
		s.waitForServerState(t, cms, 30*time.Second) // the watch carried events before the cut
		if p.Cut() == 0 {
			t.Fatalf("round %d: nothing to cut", round)
		}
	}
	createN(t, cms, "last", 20)
	s.waitForServerState(t, cms, time.Minute)
	t.Logf("after 5 cuts: %d watches, %d sync requests, %v relists", lw.watches.Load(), lw.syncs(), relists(t, reg))
	if lw.watches.Load() < 6 {
		t.Errorf("%d watches, want a re-watch after each of 5 cuts", lw.watches.Load())
	}
}

func TestReflector_skipsObjectsItCannotUseWithoutCrashing(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "cm", 3)
	// A misconfigured ListerWatcher: it promises Pods but lists ConfigMaps.
	lw := listwatch.New[*corev1.Pod](cms.List, cms.Watch, listwatch.Options{})
	reg := prometheus.NewRegistry()
	pods := &podCount{changed: make(chan struct{}, 1)}
	r, err := reflector.New[*corev1.Pod](lw, pods, reflector.Options{Telemetry: telemetry.Telemetry{Registerer: reg}, DisableWatchList: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	skipped := func() float64 { return metricSum(t, reg, "ctrlkit_reflector_skipped_objects_total") }
	waitUntil(t, 30*time.Second, "3 skipped list items", func() bool { return skipped() >= 3 })
	createN(t, cms, "later", 2)
	waitUntil(t, 30*time.Second, "5 skipped objects", func() bool { return skipped() >= 5 })
	if n := pods.adds.Load(); n != 0 {
		t.Errorf("the sink got %d objects, want none", n)
	}
	if err := r.LastError(); err != nil {
		t.Errorf("LastError = %v, want nil: skipping is not an error", err)
	}
}

func TestReflector_fallsBackToListWhenTheServerRejectsWatchList(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{Args: []string{"--feature-gates=WatchList=false"}})
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	createN(t, cms, "cm", 50)
	s := newStore()
	_, lw := start(t, srv.Config(), ns, s, reflector.Options{})
	s.waitForServerState(t, cms, 30*time.Second)
	if lw.watchLists.Load() != 1 || lw.lists.Load() < 1 {
		t.Errorf("%d watch-list requests and %d lists; want 1 refused stream, then lists", lw.watchLists.Load(), lw.lists.Load())
	}
}

type podCount struct {
	adds    atomic.Int32
	changed chan struct{}
}

func (p *podCount) Replace(items []*corev1.Pod, _ string) error {
	p.adds.Add(int32(len(items)))
	return nil
}
func (p *podCount) Add(*corev1.Pod) error    { p.adds.Add(1); return nil }
func (p *podCount) Update(*corev1.Pod) error { p.adds.Add(1); return nil }
func (p *podCount) Delete(*corev1.Pod) error { return nil }
func (p *podCount) Bookmark(string)          {}

func relists(t *testing.T, reg *prometheus.Registry) float64 {
	return metricSum(t, reg, "ctrlkit_reflector_relists_total")
}

func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, err := metrics.Sum(reg, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitUntil polls cond, which reads metrics that signal nothing, every 20ms.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

func TestReflector_carriesAHugeObjectThroughListAndWatch(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	huge := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"blob": strings.Repeat("x", 1000*1000)}} // etcd's limit is about 1.5 MB
	}
	if _, err := cms.Create(t.Context(), huge("listed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newStore()
	start(t, srv.Config(), ns, s, reflector.Options{})
	s.waitForServerState(t, cms, 30*time.Second)
	if _, err := cms.Create(t.Context(), huge("watched"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForServerState(t, cms, 30*time.Second)
}
