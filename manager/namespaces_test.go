package manager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// present records, per name, how often a reconcile found the object in a
// namespace set and how often it did not.
type present struct {
	set   *manager.Namespaces[*corev1.ConfigMap]
	mu    sync.Mutex
	found map[object.ObjectName]int
	gone  map[object.ObjectName]int
}

func (p *present) Reconcile(_ context.Context, n object.ObjectName) (controller.Result, error) {
	_, ok := p.set.Get(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.found[n]++
	} else {
		p.gone[n]++
	}
	return controller.Result{}, nil
}

// counts returns how many names of namespace ns were reconciled found,
// and how many gone.
func (p *present) counts(ns string) (found, gone int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := range p.found {
		if n.Namespace == ns {
			found++
		}
	}
	for n := range p.gone {
		if n.Namespace == ns {
			gone++
		}
	}
	return found, gone
}

// receivedBytes returns ctrlkit_informer_received_bytes_total by informer.
func receivedBytes(t *testing.T, m *manager.Manager) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ctrlkit_informer_received_bytes_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "informer" {
					out[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// A namespace set changes while the manager runs: a namespace added is
// listed and watched alone (the bytes fetched are its objects'; no other
// namespace is relisted), a namespace removed leaves the cache and its
// objects are heard as deleted (Remove) or not at all (Forget), an
// informer the set shares with another controller keeps running, and
// namespaces added and removed many times leave nothing behind.
func TestManager_namespaceSetsChangeWhileItRuns(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	const objects = 20
	var nss []string
	for range 11 {
		ns := srv.Namespace(t)
		nss = append(nss, ns)
		for j := range objects {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j)},
				Data: map[string]string{"payload": strings.Repeat("x", 1000)}}
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts := quiet(t)
	opts.Logger = slog.New(slog.DiscardHandler) // the cycles below would fill the test log
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manager.InNamespaces[*corev1.ConfigMap](m, manager.Scope{Namespace: "x"}, "a"); err == nil {
		t.Error("InNamespaces with a scope that names a namespace succeeded")
	}
	set, err := manager.InNamespaces[*corev1.ConfigMap](m, manager.Scope{}, nss[:10]...)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Add("Not_A_Namespace"); err == nil {
		t.Error("Add of an invalid namespace name succeeded")
	}
	rec := &present{set: set, found: map[object.ObjectName]int{}, gone: map[object.ObjectName]int{}}
	c, err := manager.NewController(m, "set", rec, manager.ControllerOptions{}, set.For())
	if err != nil {
		t.Fatal(err)
	}
	// Another controller shares the first namespace's informer.
	shared := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: nss[0]})
	plain := &counting{}
	if _, err := manager.NewController(m, "plain", plain, manager.ControllerOptions{}, manager.For(shared)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	base := "http://" + m.Addr(ctx)
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	eventually(t, 30*time.Second, "every object of the ten namespaces reconciled", func() bool {
		for _, ns := range nss[:10] {
			if f, _ := rec.counts(ns); f != objects {
				return false
			}
		}
		return true
	})
	if got := len(set.List("", nil)); got != 10*objects {
		t.Errorf("the set caches %d objects, want %d", got, 10*objects)
	}

	// Add: the new namespace's objects only.
	member := func(ns string) string { return "configmaps/v1 in namespace " + ns }
	before := receivedBytes(t, m)
	if err := set.Add(nss[10]); err != nil {
		t.Fatalf("Add while running: %v", err)
	}
	eventually(t, 30*time.Second, "the added namespace synced", func() bool { return set.Synced(nss[10]) })
	if set.Synced("not-in-the-set") {
		t.Error("Synced of a namespace outside the set = true")
	}
	if got := len(set.List(nss[10], nil)); got != objects {
		t.Errorf("once the added namespace synced, the set lists %d of its objects, want %d", got, objects)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz right after a namespace was added = %d %s; want 200", code, body)
	}
	eventually(t, 30*time.Second, "the added namespace's objects reconciled", func() bool {
		f, _ := rec.counts(nss[10])
		return f == objects
	})
	after := receivedBytes(t, m)
	listed := protobufListSize(t, srv.Config(), nss[10])
	fetched := after[member(nss[10])]
	t.Logf("namespace added to a set of 10: %.0f bytes fetched for a namespace whose list is %d bytes (%.3fx)",
		fetched, listed, fetched/float64(listed))
	if fetched > 1.05*float64(listed) {
		t.Errorf("adding a namespace fetched %.0f bytes, more than 1.05x its list of %d bytes", fetched, listed)
	}
	for _, ns := range nss[:10] {
		if d := after[member(ns)] - before[member(ns)]; d > 1024 {
			t.Errorf("namespace %s received %.0f bytes while another was added: relisted", ns, d)
		}
	}

	// Remove: deletes heard; the shared informer keeps serving "plain".
	if err := set.Remove(nss[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the removed namespace's objects reconciled as gone", func() bool {
		_, g := rec.counts(nss[0])
		return g == objects
	})
	if _, ok := set.Get(object.ObjectName{Namespace: nss[0], Name: "cm-0"}); ok {
		t.Error("the set still serves an object of a removed namespace")
	}
	// Forget: nothing heard; its informer, held by no one else, stops.
	if err := set.Forget(nss[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps(nss[0]).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	late := object.ObjectName{Namespace: nss[0], Name: "late"}
	eventually(t, 30*time.Second, "the other controller reconciles on the shared informer", func() bool { return plain.count(late) > 0 })
	if rec.mu.Lock(); rec.found[late]+rec.gone[late] != 0 {
		t.Errorf("the set's controller reconciled %v, in a namespace removed from its set", late)
	}
	rec.mu.Unlock()
	if _, g := rec.counts(nss[1]); g != 0 {
		t.Errorf("Forget: %d objects heard as deleted, want 0", g)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `ctrlkit_informer_cached_objects{informer="`+member(nss[0])+`"}`) {
		t.Error("the shared informer stopped when its namespace left the set")
	}
	if strings.Contains(metrics, `ctrlkit_informer_cached_objects{informer="`+member(nss[1])+`"}`) {
		t.Error("the forgotten namespace's informer, held by no one else, still runs")
	}
	if got, want := set.Namespaces(), slices.Sorted(slices.Values(nss[2:])); !slices.Equal(got, want) {
		t.Errorf("Namespaces() = %v, want %v", got, want)
	}

	// Many cycles of a namespace added and removed leave nothing behind.
	goroutines, heap := runtime.NumGoroutine(), leakcheck.LiveHeap()
	cycles := 50
	if n, err := strconv.Atoi(os.Getenv("CTRLKIT_NAMESPACE_CYCLES")); err == nil {
		cycles = n
	}
	for i := range cycles {
		if err := set.Add(nss[1]); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the namespace added again cached", func() bool {
			_, ok := set.Get(object.ObjectName{Namespace: nss[1], Name: "cm-0"})
			return ok
		})
		if err := set.Forget(nss[1]); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	eventually(t, 10*time.Second, "the goroutines of the added and removed namespaces gone", func() bool {
		return runtime.NumGoroutine() <= goroutines
	})
	grown := leakcheck.LiveHeap()
	t.Logf("%d namespace add/remove cycles: %d goroutines before, %d after; live heap %d bytes before, %d after (%+.2f%%)",
		cycles, goroutines, runtime.NumGoroutine(), heap, grown, 100*(float64(grown)/float64(heap)-1))
	if grown > heap+1<<20 {
		t.Errorf("live heap grew from %d to %d bytes over %d cycles: a removed namespace left memory behind", heap, grown, cycles)
	}

	// The controller and the caller release the set: every member stops
	// but the one "plain" holds.
	if err := m.RemoveController(c); err != nil {
		t.Fatal(err)
	}
	if err := m.ReleaseInformer(set); err != nil {
		t.Fatalf("ReleaseInformer(set): %v", err)
	}
	if err := set.Add(nss[1]); !errors.Is(err, manager.ErrNoInformer) {
		t.Errorf("Add after the last release = %v, want ErrNoInformer", err)
	}
	_, metrics = get(t, base+"/metrics")
	for _, ns := range nss[2:] {
		if strings.Contains(metrics, `ctrlkit_informer_cached_objects{informer="`+member(ns)+`"}`) {
			t.Errorf("namespace %s's informer runs after the set's last release", ns)
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// protobufListSize is the size of a list of the ConfigMaps of ns as the
// manager's informers receive it (protobuf).
func protobufListSize(t *testing.T, cfg *rest.Config, ns string) int {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = kruntime.ContentTypeProtobuf
	cfg.AcceptContentTypes = kruntime.ContentTypeProtobuf
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, err := kube.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(body)
}

// The manifests grant what informers made while the manager runs will
// read: a namespace set's kind and a WhenServed kind, in every namespace
// (a set's namespaces and a setup's scopes are known only then); they
// granted neither, and a deployed operator could not watch what it was
// for.
func TestManifests_grantTheKindsOfNamespaceSetsAndWhenServed(t *testing.T) {
	opts := quiet(t)
	opts.AddToScheme = []func(*kruntime.Scheme) error{testapi.AddToScheme}
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, opts) // makes no request
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manager.InNamespaces[*corev1.Secret](m, manager.Scope{}, "team-a"); err != nil {
		t.Fatal(err)
	}
	if err := manager.WhenServed(m, v2.SchemeGroupVersion.WithKind("Gadget"), func() (manager.Served, error) {
		return manager.Served{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := m.Manifests(manager.ManifestOptions{Name: "op", Image: "example.com/op:v1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ group, resource string }{{"", "secrets"}, {v2.SchemeGroupVersion.Group, "gadgets"}} {
		if !grants(t, out, "", r.group, r.resource, "get", "list", "watch") {
			t.Errorf("the ClusterRole grants no get, list and watch of %s:\n%s", r.resource, out)
		}
	}
}
