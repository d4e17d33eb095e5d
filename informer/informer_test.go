package informer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/store"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

const wait = 20 * time.Second

func newInformer(t *testing.T, lw reflector.ListerWatcher[*corev1.ConfigMap], opts informer.Options[*corev1.ConfigMap]) *informer.SharedIndexInformer[*corev1.ConfigMap] {
	t.Helper()
	opts.Reflector.DisableWatchList = true
	inf, err := informer.New(lw, opts)
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// run runs inf until the test ends, and checks that Run returned nil.
func run[T interface{ Run(context.Context) error }](t *testing.T, inf T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return %s after cancel", wait)
		}
	})
}

func register(t *testing.T, inf *informer.SharedIndexInformer[*corev1.ConfigMap], m *mirror, name string, resync time.Duration) *informer.Registration {
	t.Helper()
	m.handlerID = name
	reg, err := inf.AddEventHandler(m, informer.HandlerOptions{Name: name, ResyncPeriod: resync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.check(t) })
	return reg
}

func TestInformer_deliversTheInitialListThenWatchEventsInOrder(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a", "b")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	m := newMirror()
	reg := register(t, inf, m, "h", 0)
	if reg.HasSynced() || inf.HasSynced() {
		t.Fatal("synced before Run")
	}
	run(t, inf)
	waitFor(t, wait, "the registration to sync", reg.HasSynced)
	if !inf.HasSynced() {
		t.Error("the registration synced before its informer")
	}
	srv.update("a", map[string]string{"k": "v"})
	srv.remove("b")
	srv.create("c", nil)
	m.waitForView(t, wait, srv.state)
	want := []string{"add a@1 initial=true", "add b@2 initial=true", "update a@1->3", "delete ns/b@4 unknown=false", "add c@5 initial=false"}
	if got := m.callList(); !slices.Equal(got, want) {
		t.Errorf("calls:\n%q\nwant\n%q", got, want)
	}
	if got := inf.LastSyncResourceVersion(); got != "5" {
		t.Errorf("LastSyncResourceVersion = %q, want 5", got)
	}
}

func TestInformer_relistAppliesTheListThenReportsTombstonesOfWhatItLacked(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("gone", "kept")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	m := newMirror()
	var mu sync.Mutex
	var cacheAtDelete []string
	m.onCall = func(call string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(call, "delete") && cacheAtDelete == nil {
			cacheAtDelete = cachedKeys(inf)
			slices.Sort(cacheAtDelete)
		}
	}
	register(t, inf, m, "h", 0)
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	m.waitForView(t, wait, srv.state)

	srv.stall()
	srv.remove("gone")
	srv.update("kept", map[string]string{"k": "v"})
	srv.create("new", nil)
	srv.expireAndResume()
	m.waitForView(t, wait, srv.state)

	want := []string{"update kept@2->4", "add new@5 initial=false", "delete ns/gone@1 unknown=true"}
	if got := m.callList()[2:]; !slices.Equal(got, want) {
		t.Errorf("after the relist:\n%q\nwant\n%q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"ns/kept", "ns/new"}; !slices.Equal(cacheAtDelete, want) {
		t.Errorf("cache during the first tombstone = %q, want the whole snapshot %q", cacheAtDelete, want)
	}
}

func TestInformer_aRelistNotifiesOnlyObjectsWhoseResourceVersionChanged(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("same", "changed", "gone")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	a, b := newMirror(), newMirror()
	register(t, inf, a, "a", 0)
	register(t, inf, b, "b", 0)
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	a.waitForView(t, wait, srv.state)
	b.waitForView(t, wait, srv.state)

	srv.stall()
	srv.update("changed", map[string]string{"k": "v"})
	srv.remove("gone")
	srv.create("new", nil)
	srv.expireAndResume()
	// A relist notifies updates and adds in list order, then the deletes of
	// what it lacked: once a handler's view has lost the deleted object, it
	// has heard every notification of the relist.
	want := []string{"update changed@2->4", "add new@6 initial=false", "delete ns/gone@3 unknown=true"}
	for _, m := range []*mirror{a, b} {
		m.waitForView(t, wait, srv.state)
		if got := m.callList()[3:]; !slices.Equal(got, want) {
			t.Errorf("handler %s after the relist heard\n%q\nwant\n%q", m.handlerID, got, want)
		}
	}
}

// An object deleted and created again while the watch was down (the
// relist lists another UID under its key) is told as a delete of the old
// object (final state unknown), then an add of the new, never as an update
// from one object to the other; with the relist streamed or atomic.
func TestInformer_aRelistThatFindsAnObjectRecreatedTellsADeleteThenAnAdd(t *testing.T) {
	for _, atomic := range []bool{false, true} {
		t.Run(fmt.Sprintf("atomic=%v", atomic), func(t *testing.T) {
			leakcheck.Check(t)
			srv := newFakeServer("kept", "recreated")
			opts := informer.Options[*corev1.ConfigMap]{}
			opts.AtomicRelist = atomic
			inf := newInformer(t, srv, opts)
			m := newMirror()
			register(t, inf, m, "m", 0)
			run(t, inf)
			waitFor(t, wait, "sync", inf.HasSynced)
			m.waitForView(t, wait, srv.state)

			srv.stall()
			srv.remove("recreated")
			srv.create("recreated", map[string]string{"k": "v"})
			srv.expireAndResume()
			m.waitForView(t, wait, srv.state)
			want := []string{"delete ns/recreated@2 unknown=true", "add recreated@4 initial=false"}
			if got := m.callList()[2:]; !slices.Equal(got, want) {
				t.Errorf("after the relist the handler heard\n%q\nwant\n%q", got, want)
			}
			m.check(t)
		})
	}
}

func TestInformer_lateHandlerFirstGetsTheCacheAsInitialAdds(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a", "b", "c")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	srv.update("a", nil)
	waitFor(t, wait, "the update in the cache", func() bool {
		o, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: "a"})
		return ok && o.ResourceVersion == "4"
	})

	late := newMirror()
	release := make(chan struct{})
	late.block = release
	reg := register(t, inf, late, "late", 0)
	if reg.HasSynced() {
		t.Error("a late handler synced before it processed the cache")
	}
	srv.create("d", nil)
	close(release)
	waitFor(t, wait, "the late registration to sync", reg.HasSynced)
	late.waitForView(t, wait, srv.state)
	if late.initial != 3 {
		t.Errorf("%d initial adds, want 3 (the cache when it was added)", late.initial)
	}
}

func TestInformer_slowHandlerBlocksNobodyAndItsBacklogCoalescesPerKey(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("hot", "cold")
	inf, reg := newMeasuredInformer(t, srv)
	slow, fast := newMirror(), newMirror()
	release := make(chan struct{})
	slow.block = release
	slowReg := register(t, inf, slow, "slow", 0)
	register(t, inf, fast, "fast", 0)
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	if slowReg.HasSynced() {
		t.Error("a handler blocked in its first initial add has synced")
	}
	for range 1000 {
		srv.update("hot", nil)
	}
	fast.waitForView(t, wait, srv.state)
	if n := gauge(t, reg, "ctrlkit_informer_handler_pending_keys", "slow"); n > 2 {
		t.Errorf("slow handler has %v keys pending after 1000 updates of one key, want at most 2", n)
	}
	if age := gauge(t, reg, "ctrlkit_informer_handler_oldest_pending_seconds", "slow"); age <= 0 {
		t.Errorf("slow handler's oldest pending age = %v, want > 0", age)
	}
	if n := gauge(t, reg, "ctrlkit_informer_handler_pending_keys", "fast"); n != 0 {
		t.Errorf("fast handler has %v keys pending once it caught up, want 0", n)
	}
	close(release)
	slow.waitForView(t, wait, srv.state)
	waitFor(t, wait, "the slow registration to sync", slowReg.HasSynced)
	// Up to 16 notifications of a key wait as they came; past that they
	// are coalesced: the 1000 updates reach the lagging handler as at most
	// 16 calls besides the two initial adds.
	if n := len(slow.callList()); n > 2+16 {
		t.Errorf("slow handler got %d calls for 2 initial adds and 1000 updates, want them coalesced to at most 18", n)
	}
}

func TestInformer_panickingHandlerIsRecoveredCountedAndOthersStillHear(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf, reg := newMeasuredInformer(t, srv)
	bad, good := panicsOnUpdates(), newMirror()
	register(t, inf, bad, "bad", 0)
	register(t, inf, good, "good", 0)
	run(t, inf)
	bad.waitForView(t, wait, srv.state)
	srv.update("a", nil)
	bad.waitForView(t, wait, srv.state) // the update panicked after the mirror recorded it
	srv.create("b", nil)
	srv.update("b", nil)
	bad.waitForView(t, wait, srv.state)
	good.waitForView(t, wait, srv.state)
	waitFor(t, wait, "the panic to be counted", func() bool {
		return counter(t, reg, "ctrlkit_informer_handler_panics_total", "bad") >= 1
	})
	// Coalescing may merge an add with the update after it, so the other
	// handler hears at least one call per object (its view above is the
	// server's state: it missed nothing).
	if n := len(good.callList()); n < 2 {
		t.Errorf("the other handler heard %d calls, want at least one per object", n)
	}
}

// A controller with two sources on one informer (Owns and Watches of one
// kind) registers two handlers of its name: their series are one, or
// every scrape of the registry would fail.
func TestInformer_handlersOfOneNameAreOneSeries(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf, reg := newMeasuredInformer(t, srv)
	bad, good := panicsOnUpdates(), newMirror()
	badReg := register(t, inf, bad, "c", 0)
	register(t, inf, good, "c", 0)
	run(t, inf)
	bad.waitForView(t, wait, srv.state)
	srv.update("a", nil)
	bad.waitForView(t, wait, srv.state)
	good.waitForView(t, wait, srv.state)
	waitFor(t, wait, "the panic to be counted under the shared name", func() bool {
		return counter(t, reg, "ctrlkit_informer_handler_panics_total", "c") >= 1 // counter fails the test if Gather does
	})
	if n := gauge(t, reg, "ctrlkit_informer_handler_pending_keys", "c"); n != 0 {
		t.Errorf("%v keys pending once both handlers caught up, want 0", n)
	}
	before := counter(t, reg, "ctrlkit_informer_handler_panics_total", "c")
	badReg.Remove()
	if after := counter(t, reg, "ctrlkit_informer_handler_panics_total", "c"); after < before {
		t.Errorf("the name's panics went from %v to %v as the handler that panicked was removed: a counter goes down", before, after)
	}
}

func TestInformer_transformRunsBeforeCachingAndStripsManagedFieldsByDefault(t *testing.T) {
	for _, tc := range []struct {
		name        string
		keep        bool
		wantManaged int
	}{
		{name: "managed fields are stripped by default"},
		{name: "managed fields are kept on request", keep: true, wantManaged: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			srv := newFakeServer()
			o := srv.create("a", nil)
			o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
			inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{KeepManagedFields: tc.keep},
				Transform: func(c *corev1.ConfigMap) (*corev1.ConfigMap, error) {
					c.Labels = map[string]string{"transformed": "yes"}
					return c, nil
				}})
			run(t, inf)
			waitFor(t, wait, "sync", inf.HasSynced)
			got, _ := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: "a"})
			if len(got.ManagedFields) != tc.wantManaged || got.Labels["transformed"] != "yes" {
				t.Errorf("cached %d managed fields, labels %v; want %d and transformed", len(got.ManagedFields), got.Labels, tc.wantManaged)
			}
		})
	}
}

func TestInformer_addIndexersBeforeAndAfterStart(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer()
	srv.create("a", map[string]string{"team": "x"})
	srv.create("b", map[string]string{"team": "y"})
	byData := func(key string) store.IndexFunc[*corev1.ConfigMap] {
		return func(c *corev1.ConfigMap) ([]string, error) { return []string{c.Data[key]}, nil }
	}
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	if err := inf.AddIndexers(store.Indexers[*corev1.ConfigMap]{"before": byData("team")}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	if err := inf.AddIndexers(store.Indexers[*corev1.ConfigMap]{"after": byData("team")}); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []string{"before", "after"} {
		objs, err := inf.Reader().ByIndex(idx, "x")
		var keys []string
		for _, o := range objs {
			keys = append(keys, object.NameOf(o).String())
		}
		if err != nil || !slices.Equal(keys, []string{"ns/a"}) {
			t.Errorf("index %s: %q, %v; want [ns/a]", idx, keys, err)
		}
	}
}

// Run returns once; once stopped (IsStopped), the informer refuses
// handlers.
func TestInformer_runReturnsOnceAndRefusesLateHandlersAfterStopping(t *testing.T) {
	leakcheck.Check(t)
	inf := newInformer(t, newFakeServer("a"), informer.Options[*corev1.ConfigMap]{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	waitFor(t, wait, "sync", inf.HasSynced)
	if err := inf.Run(ctx); !errors.Is(err, informer.ErrStarted) {
		t.Errorf("second Run = %v, want ErrStarted", err)
	}
	if inf.IsStopped() {
		t.Error("IsStopped while running")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if !inf.IsStopped() {
		t.Error("not IsStopped once Run returned")
	}
	if _, err := inf.AddEventHandler(newMirror(), informer.HandlerOptions{}); !errors.Is(err, informer.ErrStopped) {
		t.Errorf("AddEventHandler after Run = %v, want ErrStopped", err)
	}
}

func TestInformer_removedHandlerHearsNothingMore(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	removed, other := newMirror(), newMirror()
	reg := register(t, inf, removed, "removed", 0)
	register(t, inf, other, "other", 0)
	run(t, inf)
	removed.waitForView(t, wait, srv.state)
	reg.Remove()
	reg.Remove()
	srv.create("b", nil)
	other.waitForView(t, wait, srv.state)
	if got := removed.callList(); len(got) != 1 {
		t.Errorf("removed handler heard %q, want only the initial add", got)
	}
}

func TestInformer_reportsWatchErrorsToItsHandler(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	srv.setListErr(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC")))
	errs := make(chan error, 10)
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{OnError: func(err error) {
		select {
		case errs <- err:
		default:
		}
	}}}})
	run(t, inf)
	select {
	case err := <-errs:
		if !apierrors.IsForbidden(err) {
			t.Errorf("error handler got %v, want 403 Forbidden", err)
		}
	case <-time.After(wait):
		t.Fatal("the error handler heard nothing")
	}
	if inf.HasSynced() || !apierrors.IsForbidden(inf.LastError()) {
		t.Errorf("HasSynced = %v, LastError = %v; want false and Forbidden", inf.HasSynced(), inf.LastError())
	}
}

func TestInformer_aDeleteGoesThroughEvenWhenTheTransformFails(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{
		Transform: func(c *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			if c.Data["fail"] == "yes" {
				return nil, errors.New("cannot transform")
			}
			return c, nil
		}})
	m := newMirror()
	register(t, inf, m, "h", 0)
	run(t, inf)
	m.waitForView(t, wait, srv.state)
	srv.change(watch.Deleted, "a", map[string]string{"fail": "yes"})
	m.waitForView(t, wait, srv.state)
	if _, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: "a"}); ok {
		t.Error("the cache still holds the deleted object")
	}
}

// cachedKeys returns the keys the informer's cache holds, sorted.
func cachedKeys(inf *informer.SharedIndexInformer[*corev1.ConfigMap]) []string {
	var keys []string
	for _, n := range inf.Reader().Keys() {
		keys = append(keys, n.String())
	}
	slices.Sort(keys)
	return keys
}

// newMeasuredInformer is newInformer over srv with a registry of its own
// for its metrics.
func newMeasuredInformer(t *testing.T, srv *fakeServer) (*informer.SharedIndexInformer[*corev1.ConfigMap], *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return newInformer(t, srv, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{
		Telemetry: telemetry.Telemetry{Registerer: reg}}}), reg
}

// panicsOnUpdates is a mirror whose handler panics on every update, after
// recording it.
func panicsOnUpdates() *mirror {
	m := newMirror()
	m.panicOn = func(call string) bool { return strings.HasPrefix(call, "update") }
	return m
}

// waitClosed fails the test with msg unless ch closes within wait.
func waitClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatal(msg)
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A registration's Synced channel closes exactly when its HasSynced turns
// true: after the handler returned from the initial list (a slow one
// holds it open), for an Enqueuer once its initial keys were given to it,
// and for a handler added late once it has the whole cache.
func TestInformer_syncedChannelsCloseWhenHasSyncedTurnsTrue(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a", "b")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	slow := newMirror()
	slow.block = make(chan struct{})
	reg := register(t, inf, slow, "slow", 0)
	keys := &keyRecorder{}
	sinkReg, err := inf.AddEventHandler(keys, informer.HandlerOptions{Name: "keys"})
	if err != nil {
		t.Fatal(err)
	}
	if closed(reg.Synced()) || closed(sinkReg.Synced()) || closed(inf.Synced()) {
		t.Fatal("a Synced channel closed before Run")
	}
	run(t, inf)
	waitClosed(t, inf.Synced(), "the informer's Synced channel did not close")
	waitClosed(t, sinkReg.Synced(), "the Enqueuer's Synced channel did not close")
	if got := keys.calls(); len(got) != 2 || !sinkReg.HasSynced() {
		t.Errorf("when the Enqueuer's channel closed it had %q, HasSynced %v; want both keys, true", got, sinkReg.HasSynced())
	}
	if closed(reg.Synced()) || reg.HasSynced() {
		t.Fatal("the slow handler's channel closed (or HasSynced) while it was still in its first OnAdd")
	}
	close(slow.block)
	waitClosed(t, reg.Synced(), "the slow handler's Synced channel did not close once it returned")
	if !reg.HasSynced() || len(slow.callList()) != 2 {
		t.Errorf("when its channel closed: HasSynced %v after %q; want true after both adds", reg.HasSynced(), slow.callList())
	}

	late := newMirror()
	lateReg := register(t, inf, late, "late", 0)
	waitClosed(t, lateReg.Synced(), "a late handler's Synced channel did not close")
	if got := late.callList(); len(got) != 2 || !lateReg.HasSynced() {
		t.Errorf("when the late handler's channel closed it had %q, HasSynced %v; want both adds, true", got, lateReg.HasSynced())
	}
}
