package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// counted counts the reconciles of each key.
type counted struct {
	mu sync.Mutex
	n  map[fleet.Key]int
}

func (c *counted) Reconcile(_ context.Context, k fleet.Key) (controller.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
	return controller.Result{}, nil
}

func (c *counted) times(k fleet.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// informerRows returns the names of the informers the fleet runs, as its
// debug page lists them.
func informerRows(f *fleet.Fleet) []string {
	var names []string
	for _, i := range f.DebugSource().State().Informers {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// A fleet's scope changes while it runs: For, Owns and Watches added after
// clusters are engaged start their informers in every engaged cluster, a
// source removed stops them everywhere (its cache, goroutines and debug
// rows gone, over many cycles) and is not built in a cluster engaged
// later; the For source stays.
func TestFleet_sourcesAddedAndRemovedWhileItRuns(t *testing.T) {
	const ns = "scope"
	srv, kube := startServer(t, ns)
	leakcheck.Check(t)
	rec := &counted{n: map[fleet.Key]int{}}
	f, err := fleet.New(rec, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("a", srv.Config()); err != nil { // a fleet with no source yet
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	for _, name := range []string{"x", "y"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	x := fleet.Key{Cluster: "a", ObjectName: object.ObjectName{Namespace: ns, Name: "x"}}

	// For, added while the fleet runs with a cluster engaged.
	cms, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "x reconciled in a, once For was added", func() bool { return rec.times(x) > 0 })
	if _, ok := cms.Get(x); !ok {
		t.Error("the late For source's cache in a does not hold x")
	}
	if err := cms.Remove(); !errors.Is(err, fleet.ErrRemoveFor) {
		t.Errorf("removing the For source = %v, want ErrRemoveFor", err)
	}
	if _, err := fleet.For[*corev1.Secret](f, fleet.Scope{}); !errors.Is(err, fleet.ErrSecondFor) {
		t.Errorf("a second For = %v, want ErrSecondFor", err)
	}

	// Watches, added and removed: a Secret named like a ConfigMap queues it.
	watch := func() *fleet.Cache[*corev1.Secret] {
		t.Helper()
		c, err := fleet.Watches(f, fleet.Scope{Namespace: ns}, func(s *corev1.Secret) []object.ObjectName {
			return []object.ObjectName{object.NameOf(s)}
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	secrets := watch()
	before := rec.times(x)
	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Secret x queued x through the late Watches", func() bool { return rec.times(x) > before })
	eventually(t, 30*time.Second, "the Watches source's cache in a holds the Secret", func() bool {
		r, ok := secrets.Reader("a")
		if !ok {
			return false
		}
		_, ok = r.Get(x.ObjectName)
		return ok
	})
	if got, want := informerRows(f), []string{"a: ConfigMap", "a: Secret"}; !slices.Equal(got, want) {
		t.Errorf("informers = %v, want %v", got, want)
	}
	if err := secrets.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Remove(); err != nil {
		t.Errorf("removing a source twice = %v, want nil", err)
	}
	if _, ok := secrets.Reader("a"); ok {
		t.Error("a removed source's cache is still served")
	}
	if got, want := informerRows(f), []string{"a: ConfigMap"}; !slices.Equal(got, want) {
		t.Errorf("informers after Remove = %v, want %v", got, want)
	}

	// A cluster engaged after the removal builds For only.
	if err := f.Engage("b", srv.Config()); err != nil {
		t.Fatal(err)
	}
	xb := fleet.Key{Cluster: "b", ObjectName: x.ObjectName}
	eventually(t, 30*time.Second, "x reconciled in b", func() bool { return rec.times(xb) > 0 })
	if got, want := informerRows(f), []string{"a: ConfigMap", "b: ConfigMap"}; !slices.Equal(got, want) {
		t.Errorf("informers once b joined = %v, want %v", got, want)
	}

	// Added and removed many times over two clusters: nothing stays.
	cycle := func() {
		t.Helper()
		c := watch()
		eventually(t, 30*time.Second, "the Watches source synced in both clusters", func() bool {
			for _, cl := range []string{"a", "b"} {
				r, ok := c.Reader(cl)
				if !ok {
					return false
				}
				if _, ok := r.Get(x.ObjectName); !ok {
					return false
				}
			}
			return true
		})
		if err := c.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		cycle()
	}
	goroutines, heap := runtime.NumGoroutine(), leakcheck.LiveHeap()
	const cycles = 50
	for range cycles {
		cycle()
	}
	eventually(t, 10*time.Second, "the removed sources' goroutines gone", func() bool { return runtime.NumGoroutine() <= goroutines })
	mid := leakcheck.LiveHeap()
	// As many cycles again: memory a cycle left behind would grow with them.
	for range cycles {
		cycle()
	}
	eventually(t, 10*time.Second, "the removed sources' goroutines gone", func() bool { return runtime.NumGoroutine() <= goroutines })
	after := leakcheck.LiveHeap()
	t.Logf("2 x %d Watches add/remove cycles over 2 clusters: %d goroutines before, %d after; live heap %d bytes before, %d after "+
		"the first %d (%+.2f%%), %d after the next %d (%+.2f%%)", cycles, goroutines, runtime.NumGoroutine(),
		heap, mid, cycles, 100*(float64(mid)/float64(heap)-1), after, cycles, 100*(float64(after)/float64(mid)-1))
	// A source's informers cost tens of kB: one left behind per cycle is
	// far above the noise of a few runtime allocations.
	if limit := max(mid/100, 64<<10); after > mid+limit {
		t.Errorf("live heap grew from %d to %d (more than %d bytes) over %d more cycles: a removed source left memory behind", mid, after, limit, cycles)
	}
	if got, want := informerRows(f), []string{"a: ConfigMap", "b: ConfigMap"}; !slices.Equal(got, want) {
		t.Errorf("informers after the cycles = %v, want %v", got, want)
	}

	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Owns[*corev1.Secret](f, fleet.Scope{}); !errors.Is(err, fleet.ErrStopped) {
		t.Errorf("Owns after Run returned = %v, want ErrStopped", err)
	}
}

// Sources added and removed while clusters are engaged and disengaged, all
// at once: every cluster ends with the informers of the sources left, no
// more, no fewer. (Nothing runs: the clusters' servers are never called.)
func TestFleet_sourcesFollowedByClustersEngagedMeanwhile(t *testing.T) {
	leakcheck.Check(t)
	f, err := fleet.New(&counted{n: map[fleet.Key]int{}}, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{}); err != nil {
		t.Fatal(err)
	}
	var kept []*fleet.Cache[*corev1.Secret]
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 40 {
			c, err := fleet.Watches(f, fleet.Scope{}, func(s *corev1.Secret) []object.ObjectName { return nil })
			if err != nil {
				t.Error(err)
				return
			}
			if i%4 == 0 {
				kept = append(kept, c)
			} else if err := c.Remove(); err != nil {
				t.Error(err)
			}
		}
	})
	for w := range 2 {
		wg.Go(func() {
			for i := range 20 {
				name := fmt.Sprintf("c%d-%d", w, i)
				if err := f.Engage(name, cfg); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					if err := f.Disengage(name); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	clusters := f.Clusters()
	if len(clusters) != 20 {
		t.Fatalf("%d clusters engaged, want 20", len(clusters))
	}
	rows := map[string]int{}
	for _, name := range informerRows(f) {
		cluster, _, _ := strings.Cut(name, ": ")
		rows[cluster]++
	}
	for _, name := range clusters {
		if got, want := rows[name], 1+len(kept); got != want {
			t.Errorf("cluster %s runs %d informers, want %d (For and the %d Watches kept)", name, got, want, len(kept))
		}
		for _, c := range kept {
			if _, ok := c.Reader(name); !ok {
				t.Errorf("cluster %s has no informer of a kept Watches source", name)
			}
		}
	}
	for _, name := range clusters {
		if err := f.Disengage(name); err != nil {
			t.Error(err)
		}
	}
}

// A cluster reached over plain HTTP with no credentials (kubectl proxy's
// address), for which client-go's client has no transport of its own, is
// called through the default transport: its informers' requests reach the
// server (here one that answers 503), fail and are reported, and the
// process goes on.
func TestFleet_aPlainHTTPClusterWithoutCredentialsIsCalled(t *testing.T) {
	leakcheck.Check(t)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	f, err := fleet.New(&counted{n: map[fleet.Key]int{}}, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("proxy", &rest.Config{Host: srv.URL}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	eventually(t, 30*time.Second, "the cluster's informer called its server and reported the failure", func() bool {
		c, ok := f.Cluster("proxy")
		return ok && calls.Load() > 0 && c.Err() != nil
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// A source whose informer cannot be built in one cluster (here: its
// metrics' names taken on the registry) fails its Watches, which is rolled
// back in every cluster; the other clusters' informers of it stop, and the
// next source is built everywhere. (Nothing runs: no server is called.)
func TestFleet_aSourceThatCannotBeBuiltInOneClusterIsRolledBack(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	opts := fleet.Options{}
	opts.Controller.Telemetry.Registerer = reg
	f, err := fleet.New(&counted{n: map[fleet.Key]int{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := f.Engage(name, &rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	// An informer of the test's own takes the name cluster b's Secret
	// informer would have.
	squatter, err := informer.New[*corev1.Secret](listwatch.New[*corev1.Secret](
		func(context.Context, metav1.ListOptions) (*corev1.SecretList, error) {
			return &corev1.SecretList{}, nil
		},
		func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil }, listwatch.Options{}),
		informer.Options[*corev1.Secret]{Name: "b: Secret", FactoryOptions: informer.FactoryOptions{Telemetry: telemetry.Telemetry{Registerer: reg}}})
	if err != nil {
		t.Fatal(err)
	}
	byName := func(s *corev1.Secret) []object.ObjectName { return []object.ObjectName{object.NameOf(s)} }
	if _, err := fleet.Watches(f, fleet.Scope{}, byName); err == nil {
		t.Fatal("Watches whose informer cannot be built in cluster b succeeded")
	}
	if got, want := informerRows(f), []string{"a: ConfigMap", "b: ConfigMap"}; !slices.Equal(got, want) {
		t.Errorf("informers after the failed Watches = %v, want %v (rolled back in a too)", got, want)
	}
	squatter.Close()
	if _, err := fleet.Watches(f, fleet.Scope{}, byName); err != nil {
		t.Fatalf("Watches once the name is free: %v", err)
	}
	if got, want := informerRows(f), []string{"a: ConfigMap", "a: Secret (Watches)", "b: ConfigMap", "b: Secret (Watches)"}; !slices.Equal(got, want) {
		t.Errorf("informers = %v, want %v", got, want)
	}
	for _, name := range []string{"a", "b"} {
		if err := f.Disengage(name); err != nil {
			t.Error(err)
		}
	}
}
