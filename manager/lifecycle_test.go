package manager_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// counting counts its reconciles per name; reconciled, if not nil, is
// closed at the first.
type counting struct {
	mu         sync.Mutex
	seen       map[object.ObjectName]int
	reconciled chan struct{}
}

func (c *counting) Reconcile(_ context.Context, n object.ObjectName) (controller.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[object.ObjectName]int{}
		if c.reconciled != nil {
			close(c.reconciled)
		}
	}
	c.seen[n]++
	return controller.Result{}, nil
}

func (c *counting) count(n object.ObjectName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[n]
}

// A controller added while the manager runs starts (on an informer another
// controller shares, and one created for it) without the replica turning
// unready; removed, it stops, its metrics go, the other controller keeps
// running on a cache that is never relisted, and its name can be taken
// again. Removing it twice, and adding one once Run ends, are clear errors.
func TestManager_controllersComeAndGoWhileItRuns(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	opts := quiet(t)
	opts.Logger = slog.New(slog.DiscardHandler) // the test log would keep two lines a cycle: memory the heap check would count
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	first := &counting{}
	if _, err := manager.NewController(m, "first", first, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	base := "http://" + m.Addr(ctx)
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	syncs := cms.Stats().Reflector.Syncs

	create := func(name string) object.ObjectName {
		t.Helper()
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return object.ObjectName{Namespace: ns, Name: name}
	}
	late := &counting{}
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns}) // a new informer, started at once
	c, err := manager.NewController(m, "late", late, manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets))
	if err != nil {
		t.Fatalf("NewController while running: %v", err)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz right after a controller was added = %d %s; want 200: the replica stays ready", code, body)
	}
	a := create("a")
	eventually(t, 30*time.Second, "both controllers reconcile a", func() bool { return first.count(a) > 0 && late.count(a) > 0 })
	if _, metrics := get(t, base+"/metrics"); !strings.Contains(metrics, `controller_runtime_reconcile_total{controller="late"`) {
		t.Error(`/metrics has no series of the added controller "late"`)
	}

	if err := m.RemoveController(c); err != nil {
		t.Fatalf("RemoveController: %v", err)
	}
	if err := m.RemoveController(c); !errors.Is(err, manager.ErrNoController) {
		t.Errorf("RemoveController again = %v; want ErrNoController", err)
	}
	if _, metrics := get(t, base+"/metrics"); strings.Contains(metrics, `controller="late"`) {
		t.Error(`/metrics still has series of the removed controller "late"`)
	}
	if _, body := get(t, base+"/debug/ctrlkit/state.json"); strings.Contains(body, `"late"`) {
		t.Error(`the debug page still lists the removed controller "late"`)
	}
	before := late.count(a)
	b := create("b")
	eventually(t, 30*time.Second, "the first controller reconciles b", func() bool { return first.count(b) > 0 })
	if late.count(b) != 0 || late.count(a) != before {
		t.Errorf("the removed controller reconciled again: a %d times (was %d), b %d", late.count(a), before, late.count(b))
	}
	if got := cms.Stats().Reflector.Syncs; got != syncs {
		t.Errorf("the shared informer synced %d times after the start, want 0: removing a controller relisted it", got-syncs)
	}

	// The name is free again, and a controller comes and goes many times,
	// each time reconciling, leaving no goroutine and no memory behind.
	goroutines, heap := runtime.NumGoroutine(), leakcheck.LiveHeap()
	const cycles = 1000
	for i := range cycles {
		again := &counting{reconciled: make(chan struct{})}
		c, err := manager.NewController(m, "late", again, manager.ControllerOptions{}, manager.For(cms))
		if err != nil {
			t.Fatalf("cycle %d: NewController: %v", i, err)
		}
		select {
		case <-again.reconciled:
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: the controller added again reconciled nothing in 30s", i)
		}
		if err := m.RemoveController(c); err != nil {
			t.Fatalf("cycle %d: RemoveController: %v", i, err)
		}
	}
	eventually(t, 10*time.Second, "the goroutines of the added and removed controllers gone", func() bool {
		return runtime.NumGoroutine() <= goroutines
	})
	after := leakcheck.LiveHeap()
	t.Logf("%d add/remove cycles: %d goroutines before, %d after; live heap %d bytes before, %d after (%+.2f%%)",
		cycles, goroutines, runtime.NumGoroutine(), heap, after, 100*(float64(after)/float64(heap)-1))
	// A constant of about 60 kB (pools and maps grown for one more
	// controller; the same after 3,000 cycles) is allowed; a controller's
	// leftovers, a kilobyte or more each, are not.
	if after > heap+1<<20 {
		t.Errorf("live heap grew from %d to %d bytes over %d add/remove cycles: a removed controller left memory behind", heap, after, cycles)
	}

	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := manager.NewController(m, "after", &counting{}, manager.ControllerOptions{}, manager.For(cms)); !errors.Is(err, manager.ErrStopping) {
		t.Errorf("NewController after Run returned = %v; want ErrStopping", err)
	}
}

// liveHeap is the heap's live bytes after two collections.

// With leader election, a controller added while the replica leads runs
// inside the fence, as the ones added before Run do.
func TestManager_aControllerAddedWhileLeadingRuns(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	opts := quiet(t)
	opts.LeaderElection = election.Options{Name: "late-leader", Namespace: ns, Identity: "only"}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	start(t, m)
	eventually(t, 30*time.Second, "this replica leads", m.Elector().IsLeader)
	late := &counting{reconciled: make(chan struct{})}
	c, err := manager.NewController(m, "late", late, manager.ControllerOptions{}, manager.For(cms))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.reconciled:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller added while leading reconciled nothing in 30s")
	}
	if err := m.RemoveController(c); err != nil {
		t.Fatal(err)
	}
}

// named is an informer known by its name only.
type named string

func (n named) Name() string { return string(n) }

// An informer lives while a controller or a reader holds it: removing the
// controller leaves it to the reader; the reader's release stops it, takes
// its series away and lets its cache be collected; asking again makes a
// new one.
func TestManager_theLastReleaseStopsAnInformerAndFreesIt(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	name := secrets.Name()
	c, err := manager.NewController(m, "owner", &counting{}, manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets))
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Secret cached", func() bool {
		_, ok := secrets.Reader().Get(object.ObjectName{Namespace: ns, Name: "s"})
		return ok
	})
	cached := `ctrlkit_informer_cached_objects{informer="` + name + `"}`
	if err := m.RemoveController(c); err != nil {
		t.Fatal(err)
	}
	if _, metrics := get(t, base+"/metrics"); !strings.Contains(metrics, cached) {
		t.Fatalf("the informer stopped with its controller, though a reader still holds it (no %s)", cached)
	}

	if err := m.ReleaseInformer(secrets); err != nil {
		t.Fatalf("ReleaseInformer: %v", err)
	}
	if _, metrics := get(t, base+"/metrics"); strings.Contains(metrics, cached) {
		t.Errorf("/metrics still has %s after the last release", cached)
	}
	if err := m.ReleaseInformer(named(name)); !errors.Is(err, manager.ErrNoInformer) {
		t.Errorf("ReleaseInformer again = %v; want ErrNoInformer", err)
	}
	freed := weak.Make(secrets)
	secrets, c = nil, nil
	eventually(t, 5*time.Second, "the released informer collected", func() bool {
		runtime.GC()
		return freed.Value() == nil
	})

	again := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	eventually(t, 30*time.Second, "a new informer of the same scope lists the Secret", func() bool {
		_, ok := again.Reader().Get(object.ObjectName{Namespace: ns, Name: "s"})
		return ok
	})
}

// WhenServed: a controller declared for a custom resource whose CRD does
// not exist yet starts once the CRD is established, stops with its
// informer when the CRD is deleted, and starts again when it comes back;
// the replica and its other controller stay ready throughout.
func TestManager_whenServedFollowsItsCRD(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cfg := srv.Config()
	gvk := v2.SchemeGroupVersion.WithKind("Gadget")
	crdName := "gadgets." + gvk.Group
	removeCRD(t, cfg, crdName) // absent at the start
	opts := quiet(t)
	opts.AddToScheme = []func(*kruntime.Scheme) error{testapi.AddToScheme}
	m, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	if _, err := manager.NewController(m, "steady", &counting{}, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[counting]
	var informerName atomic.Value
	if err := manager.WhenServed(m, gvk, func() (manager.Served, error) {
		gadgets := manager.Informer[*v2.Gadget](m, manager.Scope{Namespace: ns})
		informerName.Store(gadgets.Name())
		rec := &counting{reconciled: make(chan struct{})}
		c, err := manager.NewController(m, "gadgets", rec, manager.ControllerOptions{}, manager.For(gadgets))
		if err != nil {
			return manager.Served{Informers: []interface{ Name() string }{gadgets}}, err
		}
		current.Store(rec)
		return manager.Served{Controllers: []*manager.Controller{c}, Informers: []interface{ Name() string }{gadgets}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	eventually(t, 30*time.Second, "/readyz 200 without the CRD", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	waiting := "waiting for CRD " + crdName
	if _, body := get(t, base+"/readyz?verbose"); !strings.Contains(body, waiting) {
		t.Errorf("/readyz?verbose does not say %q:\n%s", waiting, body)
	}
	if _, body := get(t, base+"/debug/ctrlkit/state.json"); !strings.Contains(body, `"crd":"`+crdName+`"`) {
		t.Errorf("the debug page's state does not name the CRD waited for:\n%s", body)
	}
	// Readiness is sampled all along: it must never drop.
	sampling, stopSampling := context.WithCancel(t.Context())
	sampled := make(chan []string, 1)
	// The sampler's connections close after each request: one kept beside
	// the test's own would count as goroutines the cycles left behind.
	sampler := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		var drops []string
		for sampling.Err() == nil {
			resp, err := sampler.Get(base + "/readyz")
			if err != nil {
				drops = append(drops, err.Error())
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				drops = append(drops, string(body))
			}
			time.Sleep(20 * time.Millisecond) // a sampling period, not synchronisation
		}
		sampled <- drops
	}()

	gadgets := manager.Client[*v2.Gadget](m)
	serveAndReconcile := func(round int) {
		t.Helper()
		current.Store(nil)
		if err := apiserver.InstallCRDs(t.Context(), cfg, testapi.CRDs); err != nil { // returns once established
			t.Fatal(err)
		}
		established := time.Now()
		if _, err := gadgets.Create(t.Context(), &v2.Gadget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("g", round), Namespace: ns}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created := time.Now() // a new resource's first requests may wait for the server's Retry-After (1s)
		eventually(t, 30*time.Second, "the setup ran", func() bool { return current.Load() != nil })
		select {
		case <-current.Load().reconciled:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: no reconcile 30s after the CRD was established", round)
		}
		took := time.Since(established)
		t.Logf("round %d: first reconcile %v after the CRD was established, %v after the Gadget's create returned", round, took,
			time.Since(created))
		if took > 5*time.Second || time.Since(created) > 2*time.Second {
			t.Errorf("round %d: the first reconcile came %v after the CRD was established, %v after the create; want within 5s and 2s",
				round, took, time.Since(created))
		}
	}
	unserve := func() {
		t.Helper()
		removeCRD(t, cfg, crdName)
		removed := time.Now()
		series := `ctrlkit_informer_cached_objects{informer="` + informerName.Load().(string) + `"}`
		eventually(t, 10*time.Second, "the Gadget informer and controller stopped", func() bool {
			_, metrics := get(t, base+"/metrics")
			return !strings.Contains(metrics, series) && !strings.Contains(metrics, `controller="gadgets"`)
		})
		t.Logf("the informer and controller stopped %v after the CRD was gone", time.Since(removed))
	}
	serveAndReconcile(1)
	if _, body := get(t, base+"/readyz?verbose"); strings.Contains(body, waiting) {
		t.Errorf("/readyz?verbose still says %q once the CRD is served", waiting)
	}
	unserve()

	// More create/delete cycles of the CRD leave no goroutine or memory
	// behind (CTRLKIT_CRD_CYCLES sets how many; 100 for the figure).
	cycles := 1
	if n, err := strconv.Atoi(os.Getenv("CTRLKIT_CRD_CYCLES")); err == nil && n > 0 {
		cycles = n
	}
	goroutines, heap := runtime.NumGoroutine(), leakcheck.LiveHeap()
	for i := range cycles {
		serveAndReconcile(2 + i)
		unserve()
	}
	eventually(t, 10*time.Second, "the goroutines of the cycles gone", func() bool { return runtime.NumGoroutine() <= goroutines })
	after := leakcheck.LiveHeap()
	t.Logf("%d CRD cycles: %d goroutines before, %d after; live heap %d bytes before, %d after (%+.2f%%)",
		cycles, goroutines, runtime.NumGoroutine(), heap, after, 100*(float64(after)/float64(heap)-1))
	if after > heap+1<<20 {
		t.Errorf("live heap grew from %d to %d bytes over %d CRD cycles", heap, after, cycles)
	}
	serveAndReconcile(2 + cycles)
	stopSampling()
	if drops := <-sampled; len(drops) > 0 {
		t.Errorf("/readyz dropped %d times, e.g. %s", len(drops), drops[0])
	}
}

// A WhenServed setup that fails on a served resource is tried again with
// backoff, not only at the CRD's next change, and /readyz?verbose says it
// failed and why meanwhile (it said "not served yet", and a passing error
// left the kind uncontrolled until someone touched its CRD).
func TestManager_whenServedRetriesAFailedSetupAndSaysWhy(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cfg := srv.Config()
	gvk := v2.SchemeGroupVersion.WithKind("Gadget")
	crdName := "gadgets." + gvk.Group
	removeCRD(t, cfg, crdName)
	t.Cleanup(func() { removeCRD(t, cfg, crdName) })
	if err := apiserver.InstallCRDs(t.Context(), cfg, testapi.CRDs); err != nil { // served before the manager starts
		t.Fatal(err)
	}
	opts := quiet(t)
	opts.AddToScheme = []func(*kruntime.Scheme) error{testapi.AddToScheme}
	m, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	release := make(chan struct{}) // closed once the test has seen the failure reported
	if err := manager.WhenServed(m, gvk, func() (manager.Served, error) {
		gadgets := manager.Informer[*v2.Gadget](m, manager.Scope{Namespace: ns})
		made := manager.Served{Informers: []interface{ Name() string }{gadgets}}
		calls.Add(1)
		select {
		case <-release:
		default:
			return made, errors.New("the gadget service is not reachable yet")
		}
		c, err := manager.NewController(m, "gadgets", &counting{}, manager.ControllerOptions{}, manager.For(gadgets))
		if err != nil {
			return made, err
		}
		made.Controllers = []*manager.Controller{c}
		return made, nil
	}); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	eventually(t, 30*time.Second, "/readyz?verbose saying the setup failed, and why", func() bool {
		_, body := get(t, base+"/readyz?verbose")
		return strings.Contains(body, "waiting for CRD "+crdName) && strings.Contains(body, "setup failed") &&
			strings.Contains(body, "not reachable yet")
	})
	if _, body := get(t, base+"/debug/ctrlkit/state.json"); !strings.Contains(body, `"setupError":"the gadget service is not reachable yet"`) {
		t.Errorf("the debug page's state does not carry the setup's error:\n%s", body)
	}
	close(release)
	eventually(t, 30*time.Second, "the setup retried without a change of the CRD, its controller running", func() bool {
		_, metrics := get(t, base+"/metrics")
		return strings.Contains(metrics, `controller="gadgets"`)
	})
	if _, body := get(t, base+"/readyz?verbose"); strings.Contains(body, "waiting for CRD "+crdName) {
		t.Errorf("/readyz?verbose still waits for %s once its setup succeeded:\n%s", crdName, body)
	}
	t.Logf("setup called %d times", calls.Load())
}
