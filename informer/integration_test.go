package informer_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

var env apiserver.Shared // watch cache on, as in production

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func configMaps(t *testing.T, cfg *rest.Config, ns string) typedcorev1.ConfigMapInterface {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) }) // before an earlier leak check
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoreV1().ConfigMaps(ns)
}

func realInformer(t *testing.T, cms typedcorev1.ConfigMapInterface, opts informer.Options[*corev1.ConfigMap]) *informer.SharedIndexInformer[*corev1.ConfigMap] {
	t.Helper()
	inf, err := informer.New(listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// serverState returns a fresh LIST as name -> resource version.
func serverState(t *testing.T, cms typedcorev1.ConfigMapInterface) func() map[string]string {
	return func() map[string]string {
		l, err := cms.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[string]string, len(l.Items))
		for _, c := range l.Items {
			out[c.Name] = c.ResourceVersion
		}
		return out
	}
}

// writer applies random creates, updates and deletes with 8 goroutines.
// Goroutine g owns the names cm-NNNNN with NNNNN%8 == g and knows which of
// them exist, so every operation is valid and succeeds.
type writer struct {
	cms    typedcorev1.ConfigMapInterface
	exists [8]map[int]bool
	names  int // objects are named cm-00000 .. cm-<names-1>
}

func newWriter(cms typedcorev1.ConfigMapInterface, names int) *writer {
	w := &writer{cms: cms, names: names}
	for g := range w.exists {
		w.exists[g] = map[int]bool{}
	}
	return w
}

// createAll creates every name that does not exist yet.
func (w *writer) createAll(t *testing.T) {
	w.run(t, func(g int, _ func(int) int) error {
		for i := g; i < w.names; i += 8 {
			if !w.exists[g][i] {
				if err := w.apply(t, g, i, 0); err != nil {
					return err
				}
			}
		}
		return nil
	}, 0)
}

// do applies about n random operations.
func (w *writer) do(t *testing.T, n int, seed uint64) {
	w.run(t, func(g int, rnd func(int) int) error {
		for range n / 8 {
			if err := w.apply(t, g, g+8*rnd((w.names-g+7)/8), rnd(1<<30)); err != nil {
				return err
			}
		}
		return nil
	}, seed)
}

func (w *writer) run(t *testing.T, f func(g int, rnd func(int) int) error, seed uint64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			if err := f(g, newRand(seed*8+uint64(g))); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write: %v", err)
	}
}

// apply creates name i if it does not exist, else updates it (odd r) or
// deletes it (even r).
func (w *writer) apply(t *testing.T, g, i, r int) error {
	name := fmt.Sprintf("cm-%05d", i)
	var err error
	switch {
	case !w.exists[g][i]:
		_, err = w.cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		w.exists[g][i] = true
	case r%2 == 1:
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"r": fmt.Sprint(r)}}
		_, err = w.cms.Update(t.Context(), cm, metav1.UpdateOptions{})
	default:
		err = w.cms.Delete(t.Context(), name, metav1.DeleteOptions{})
		delete(w.exists[g], i)
	}
	return err
}

func TestInformer_threeHandlersSlowPanickingAndLateConvergeToTheServer(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 100)
	w.do(t, 400, 1)

	reg := prometheus.NewRegistry()
	inf := realInformer(t, cms, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Telemetry: telemetry.Telemetry{Registerer: reg}}})
	slow, panicky, late := newMirror(), newMirror(), newMirror()
	var calls atomic.Int64
	slow.onCall = func(string) { time.Sleep(time.Millisecond) } // work, not synchronisation
	panicky.panicOn = func(string) bool { return calls.Add(1)%7 == 0 }
	register(t, inf, slow, "slow", 0)
	register(t, inf, panicky, "panicky", 0)
	run(t, inf)
	w.do(t, 400, 2)
	lateReg := register(t, inf, late, "late", 0)
	w.do(t, 400, 3)

	for _, m := range []*mirror{slow, panicky, late} {
		m.waitForView(t, time.Minute, serverState(t, cms))
	}
	waitFor(t, wait, "the late registration to sync", lateReg.HasSynced)
	if n := counter(t, reg, "ctrlkit_informer_handler_panics_total", "panicky"); n < 1 {
		t.Errorf("panics metric = %v, want panics counted", n)
	}
}

func TestInformer_objectsDeletedWhileTheWatchWasDownArriveAsTombstonesAfterACompaction(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{DisableWatchCache: true})
	ns := srv.Namespace(t)
	leakcheck.Check(t) // after the server's goroutines
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 20)
	w.createAll(t)
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	inf := realInformer(t, configMaps(t, p.Config(), ns), informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}}})
	m := newMirror()
	register(t, inf, m, "h", 0)
	run(t, inf)
	m.waitForView(t, time.Minute, serverState(t, cms))
	before := len(m.callList())

	p.Stall()
	gone := []string{"cm-00001", "cm-00004", "cm-00007"}
	for _, name := range gone {
		if err := cms.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"cm-00100", "cm-00101"} {
		if _, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	p.Resume()
	m.waitForView(t, time.Minute, serverState(t, cms))

	tombstones := map[string]bool{}
	for _, c := range m.callList()[before:] {
		if strings.HasPrefix(c, "delete") && strings.Contains(c, "unknown=true") {
			name := strings.TrimPrefix(strings.Fields(c)[1], ns+"/")
			tombstones[name[:strings.IndexByte(name, '@')]] = true
		}
	}
	for _, name := range gone {
		if !tombstones[name] {
			t.Errorf("no final-state-unknown tombstone for %s; got %v", name, slices.Sorted(maps.Keys(tombstones)))
		}
	}
}

// newRand returns a seeded source of ints in [0, n).
func newRand(seed uint64) func(n int) int {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return r.IntN
}
