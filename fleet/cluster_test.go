package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// hasSecret reports whether kube has the Secret ns/name with the data key.
func hasSecret(t *testing.T, kube kubernetes.Interface, ns, name, key string) bool {
	s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Logf("get Secret %s/%s: %v", ns, name, err)
	}
	return err == nil && s.Data[key] != nil
}

// A reconcile finds its key's cluster in its context, and writes there
// through the fleet's typed client; a Watches source queues keys in its
// own cluster; and a cluster whose API server goes down stops only
// itself: the other's reconciles go on, its status and metrics say it is
// down, and its reconciles resume when it is back.
func TestFleet_aClusterDownStopsOnlyItself(t *testing.T) {
	const ns = "fleet"
	leakcheck.Check(t) // first: the servers (b restarted) stop before it looks
	a, kubeA := startServer(t, ns)
	b, kubeB := startServer(t, ns)
	reg := prometheus.NewRegistry()
	var cms *fleet.Cache[*corev1.ConfigMap]
	var misplaced atomic.Int32
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(ctx context.Context, k fleet.Key) (controller.Result, error) {
		c, ok := fleet.ClusterFrom(ctx)
		if !ok || c.Name() != k.Cluster {
			misplaced.Add(1)
			return controller.Result{}, nil
		}
		cm, ok := cms.Get(k)
		if !ok {
			return controller.Result{}, nil
		}
		if cm.Name == "panics" {
			panic("a reconciler's bug")
		}
		data := map[string][]byte{}
		for key, v := range cm.Data {
			data[key] = []byte(v)
		}
		s := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirror-of": cm.Name}).WithData(data)
		_, err := fleet.Client[*corev1.Secret](c).Apply(ctx, s, metav1.ApplyOptions{FieldManager: "fleet-test", Force: true})
		return controller.Result{}, err
	}), fleet.Options{Controller: controller.Options[fleet.Key]{Name: "mirror", Telemetry: telemetry.Telemetry{Registerer: reg}}})
	if err != nil {
		t.Fatal(err)
	}
	if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Watches(f, fleet.Scope{Namespace: ns, LabelSelector: "mirror-of"}, func(s *corev1.Secret) []object.ObjectName {
		return []object.ObjectName{{Namespace: s.Namespace, Name: s.Labels["mirror-of"]}}
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("a", a.Config()); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("b", b.Config()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()

	create := func(kube kubernetes.Interface, name string) { createConfigMap(t, kube, ns, name) }
	create(kubeA, "x")
	create(kubeB, "x")
	eventually(t, 30*time.Second, "each cluster's Secret written in that cluster", func() bool {
		return hasSecret(t, kubeA, ns, "x", "from") && hasSecret(t, kubeB, ns, "x", "from")
	})
	// The Watches source: a mirror deleted by someone else is written again.
	if err := kubeA.CoreV1().Secrets(ns).Delete(t.Context(), "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted Secret written again (its change mapped to its ConfigMap's key in a)", func() bool {
		return hasSecret(t, kubeA, ns, "x", "from")
	})
	if c, ok := f.Cluster("a"); !ok {
		t.Error("Cluster(a) not found")
	} else if kube, err := c.Kube(); err != nil {
		t.Errorf("Kube: %v", err)
	} else if _, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "x", metav1.GetOptions{}); err != nil {
		t.Errorf("a's clientset: %v", err)
	}
	if _, ok := f.Cluster("nowhere"); ok {
		t.Error("Cluster of a name never engaged found")
	}

	// b's API server goes down.
	if err := b.Down(); err != nil {
		t.Fatal(err)
	}
	checkOneDown(t, f, "a", "b", "its server is down", 30*time.Second)
	up := func(cluster string) float64 {
		return metricValue(t, reg, "ctrlkit_fleet_cluster_up", map[string]string{"cluster": cluster})
	}
	if ua, ub := up("a"), up("b"); ua != 1 || ub != 0 {
		t.Errorf("ctrlkit_fleet_cluster_up: a %v, b %v; want 1 and 0", ua, ub)
	}
	// The debug page's state: a row per cluster's informer, b's failing.
	req := httptest.NewRequest(http.MethodGet, debug.Path+"/state.json", nil)
	req.RemoteAddr, req.Host = "127.0.0.1:40000", "localhost"
	rec := httptest.NewRecorder()
	debug.New(f.DebugSource(), debug.Options{}).ServeHTTP(rec, req)
	var state debug.State
	if err := json.Unmarshal(rec.Body.Bytes(), &state); err != nil {
		t.Fatalf("state.json (%d): %v: %s", rec.Code, err, rec.Body.String())
	}
	failingRows := map[string]bool{}
	for _, in := range state.Informers {
		failingRows[in.Name] = in.Failing
	}
	if failing, ok := failingRows["b: ConfigMap"]; !ok || !failing {
		t.Errorf("debug state's informers %v: want b's ConfigMap informer failing", failingRows)
	}
	if failing, ok := failingRows["a: ConfigMap"]; !ok || failing {
		t.Errorf("debug state's informers %v: want a's ConfigMap informer well", failingRows)
	}
	if len(state.Controllers) != 1 || state.Controllers[0].Name != "mirror" {
		t.Errorf("debug state's controllers %+v, want the fleet's, mirror", state.Controllers)
	}
	made := time.Now()
	create(kubeA, "during")
	eventually(t, 30*time.Second, "a's Secret written while b is down", func() bool { return hasSecret(t, kubeA, ns, "during", "from") })
	t.Logf("with b down, a's new object mirrored %v after it was created", time.Since(made).Round(time.Millisecond))
	if d := time.Since(made); d > 5*time.Second {
		t.Errorf("a's reconcile took %v with b down, want it unaffected (≤ 5s)", d)
	}

	// b comes back: its informers resume and so do its reconciles.
	if err := b.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	create(kubeB, "after")
	eventually(t, 60*time.Second, "b's Secret written once b is back", func() bool { return hasSecret(t, kubeB, ns, "after", "from") })
	t.Logf("b back: its new object mirrored %v after it was created", time.Since(back).Round(time.Millisecond))
	eventually(t, 30*time.Second, "b's status well again", func() bool {
		for _, s := range f.Status() {
			if s.Name == "b" {
				return s.Err == nil && s.Synced
			}
		}
		return false
	})
	if n := misplaced.Load(); n != 0 {
		t.Errorf("%d reconciles found no cluster, or another, in their context", n)
	}
	if got := metricValue(t, reg, "ctrlkit_fleet_reconciles_total", map[string]string{"cluster": "a", "result": "success"}); got < 2 {
		t.Errorf("ctrlkit_fleet_reconciles_total{cluster=a,result=success} = %v, want ≥ 2", got)
	}
	// A reconcile that panics is counted as an error (the controller
	// recovers it, beyond the fleet's count).
	create(kubeA, "panics")
	eventually(t, 30*time.Second, "the panicking reconcile counted as an error", func() bool {
		return metricValue(t, reg, "ctrlkit_fleet_reconciles_total", map[string]string{"cluster": "a", "result": "error"}) >= 1
	})
	if err := f.Disengage("b"); err != nil {
		t.Fatal(err)
	}
	if up("b") != -1 {
		t.Error("a disengaged cluster's health series still reported")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// createConfigMap creates the ConfigMap ns/name in kube, with the data
// from=name.
func createConfigMap(t *testing.T, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string]string{"from": name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// idleFleet returns a fleet whose reconciles do nothing, with a For
// source of the ConfigMaps of namespace ns.
func idleFleet(t *testing.T, ns string) *fleet.Fleet {
	t.Helper()
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkOneDown waits until the status of the cluster down reports an
// error (its server, in the words of why), then checks that the cluster
// well is synced and without one.
func checkOneDown(t *testing.T, f *fleet.Fleet, well, down, why string, within time.Duration) {
	t.Helper()
	statusOf := func(name string) (fleet.ClusterStatus, bool) {
		st := f.Status()
		i := slices.IndexFunc(st, func(s fleet.ClusterStatus) bool { return s.Name == name })
		if i < 0 {
			return fleet.ClusterStatus{}, false
		}
		return st[i], true
	}
	eventually(t, within, down+"'s status saying "+why, func() bool {
		s, ok := statusOf(down)
		return ok && s.Err != nil
	})
	if s, ok := statusOf(well); !ok || s.Err != nil || !s.Synced {
		t.Errorf("%s's status while %s: engaged %v, synced %v, err %v; want synced and no error", well, why, ok, s.Synced, s.Err)
	}
	s, _ := statusOf(down)
	t.Logf("%s's status while %s: %v", down, why, s.Err)
}

// metricValue returns the value of the series name with the labels
// want among reg's, or -1 if there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	n, err := metrics.Count(reg, name, want)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return -1
	}
	v, err := metrics.Sum(reg, name, want)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The fixed memory of an engaged cluster with an empty cache: clusters
// engaged on one server, each listing and watching an empty namespace, the
// live heap measured before and after (goal: ≤ 1 MB each; scheme and
// types shared).
func TestFleet_memoryPerEngagedCluster(t *testing.T) {
	leakcheck.Check(t)
	srv, _ := startServer(t, "empty")
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: "empty"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Owns[*corev1.Secret](f, fleet.Scope{Namespace: "empty"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	engage := func(from, to int) {
		for i := from; i < to; i++ {
			if err := f.Engage(fmt.Sprintf("c%d", i), srv.Config()); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 60*time.Second, "every cluster synced", func() bool {
			for _, s := range f.Status() {
				if !s.Synced {
					return false
				}
			}
			return true
		})
	}
	engage(0, 2) // the first clusters: what is made once (codecs, type caches)
	const n = 20
	before, goroutines := leakcheck.LiveHeap(), runtime.NumGoroutine()
	engage(2, 2+n)
	after, goroutinesAfter := leakcheck.LiveHeap(), runtime.NumGoroutine()
	perCluster := (int64(after) - int64(before)) / n
	t.Logf("%d clusters engaged with empty caches (For and Owns): %d bytes of live heap each, %.1f goroutines each",
		n, perCluster, float64(goroutinesAfter-goroutines)/n)
	if perCluster > 1<<20 {
		t.Errorf("an engaged cluster with an empty cache costs %d bytes, want ≤ 1 MB", perCluster)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A kubeconfig Secret whose credentials rotate (the same server) keeps the
// cluster's informers and cache: the cached objects are the same ones, and
// the next requests carry the new credentials (here a ServiceAccount's
// token that may only read ConfigMaps: a write is refused as that account).
func TestFleet_rotatedCredentialsKeepTheCache(t *testing.T) {
	const ns = "fleet"
	leakcheck.Check(t)
	srv, kube := startServer(t, ns)
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cms *fleet.Cache[*corev1.ConfigMap]
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran, provided := make(chan error, 1), make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	go func() { provided <- fleet.Secrets{Kube: kube, Namespace: ns}.Run(ctx, f) }()
	admin, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rot" + fleet.SecretSuffix}, Data: map[string][]byte{"value": admin}}
	if secret, err = kube.CoreV1().Secrets(ns).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := fleet.Key{Cluster: "rot", ObjectName: object.ObjectName{Namespace: ns, Name: "x"}}
	eventually(t, 30*time.Second, "the cluster engaged and its object cached", func() bool { _, ok := cms.Get(k); return ok })
	before, _ := cms.Get(k)
	cluster, _ := f.Cluster("rot")

	// A ServiceAccount that may only read ConfigMaps, and its token.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range kc.AuthInfos {
		*u = clientcmdapi.AuthInfo{Token: tr.Status.Token}
	}
	rotated, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["value"] = rotated
	if secret, err = kube.CoreV1().Secrets(ns).Update(t.Context(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the cluster given the rotated credentials", func() bool {
		c, ok := f.Cluster("rot")
		return ok && c.Config().BearerToken == tr.Status.Token
	})
	if c, _ := f.Cluster("rot"); c != cluster {
		t.Error("rotated credentials engaged the cluster again (a new Cluster), want it kept")
	}
	if after, ok := cms.Get(k); !ok || after != before {
		t.Error("rotated credentials replaced the cluster's cache (the cached object is a new one), want it kept")
	}
	_, err = fleet.Client[*corev1.Secret](cluster).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "denied"}},
		metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:serviceaccount:"+ns+":reader") {
		t.Errorf("a write after the rotation: %v; want it refused as the ServiceAccount (the new credentials)", err)
	}

	// A change that cannot be used (a typo, a rotation written half) does
	// not stop the cluster: it runs on with its previous kubeconfig, its
	// cache kept, and Refused says why until the Secret is fixed.
	secret.Data["value"] = []byte("junk: [")
	if secret, err = kube.CoreV1().Secrets(ns).Update(t.Context(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the unusable change listed by Refused", func() bool {
		r := f.Refused()
		return len(r) == 1 && r[0].Name == "rot"
	})
	if c, ok := f.Cluster("rot"); !ok || c != cluster || c.Config().BearerToken != tr.Status.Token || !f.Engaged("rot") {
		t.Error("an unusable kubeconfig change stopped or replaced the cluster, want it running on the previous one")
	}
	if after, ok := cms.Get(k); !ok || after != before {
		t.Error("an unusable kubeconfig change dropped the cluster's cache, want it kept")
	}
	secret.Data["value"] = rotated
	if _, err := kube.CoreV1().Secrets(ns).Update(t.Context(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the fixed Secret no longer refused", func() bool { return len(f.Refused()) == 0 })
	if c, ok := f.Cluster("rot"); !ok || c != cluster {
		t.Error("fixing the Secret engaged the cluster again, want it kept")
	}
	cancel()
	if err := <-provided; err != nil {
		t.Errorf("Secrets.Run: %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Two sources of one kind (For ConfigMaps in one namespace, Watches
// ConfigMaps in another) with the fleet's metrics on a registry: each
// informer has its own name, so the cluster engages and both sources
// queue keys. A cluster whose kubeconfig makes no client is refused:
// Refused and ctrlkit_fleet_clusters_refused show it until it is
// withdrawn.
func TestFleet_sourcesOfOneKindAndRefusedClusters(t *testing.T) {
	const src, dst = "src", "dst"
	a, kube := startServer(t, src)
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dst}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	var reconciles sync.Map // fleet.Key -> *atomic.Int32
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(_ context.Context, k fleet.Key) (controller.Result, error) {
		n, _ := reconciles.LoadOrStore(k, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return controller.Result{}, nil
	}), fleet.Options{Controller: controller.Options[fleet.Key]{Name: "copies", Telemetry: telemetry.Telemetry{Registerer: reg}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: src}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: dst}); !errors.Is(err, fleet.ErrSecondFor) {
		t.Errorf("a second For = %v, want ErrSecondFor", err)
	}
	if _, err := fleet.Watches(f, fleet.Scope{Namespace: dst}, func(cm *corev1.ConfigMap) []object.ObjectName {
		return []object.ObjectName{{Namespace: src, Name: cm.Name}}
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("a", a.Config()); err != nil {
		t.Fatalf("Engage of a fleet with two ConfigMap sources: %v", err)
	}
	bad := &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(t.TempDir(), "missing.crt")}}
	if err := f.Engage("bad", bad); err == nil {
		t.Fatal("Engage with a CA file that does not exist succeeded")
	}
	refusedGauge := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "ctrlkit_fleet_clusters_refused" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no ctrlkit_fleet_clusters_refused series")
		return 0
	}
	if r := f.Refused(); len(r) != 1 || r[0].Name != "bad" || r[0].Err == nil || refusedGauge() != 1 {
		t.Errorf("Refused = %v, gauge %v; want the cluster bad with its error, 1", r, refusedGauge())
	}
	if r := f.DebugSource().State().Refused; len(r) != 1 || r[0].Cluster != "bad" || !strings.Contains(r[0].Error, "missing.crt") {
		t.Errorf("the debug page's refused clusters = %+v; want bad, its error naming the missing CA file", r)
	}
	if err := f.Disengage("bad"); err != nil {
		t.Errorf("Disengage of a refused cluster: %v", err)
	}
	if r := f.Refused(); len(r) != 0 || refusedGauge() != 0 {
		t.Errorf("after its Disengage, Refused = %v, gauge %v; want none", r, refusedGauge())
	}
	if r := f.DebugSource().State().Refused; len(r) != 0 {
		t.Errorf("after its Disengage, the debug page's refused clusters = %+v; want none", r)
	}

	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	key := fleet.Key{Cluster: "a", ObjectName: object.ObjectName{Namespace: src, Name: "x"}}
	count := func() int32 {
		if n, ok := reconciles.Load(key); ok {
			return n.(*atomic.Int32).Load()
		}
		return 0
	}
	for i, ns := range []string{src, dst} { // For's object, then the one Watches maps to it
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("reconcile %d of %v, after a ConfigMap created in %s", i+1, key, ns),
			func() bool { return count() >= int32(i+1) })
	}
}

// The Secrets provider manages only the clusters it engaged: a kubeconfig
// Secret named after a cluster the program engaged (pointing elsewhere,
// or holding no kubeconfig) neither redirects nor drops it, nor does
// deleting that Secret; a name that is not UTF-8 is refused.
func TestSecrets_leavesClustersItDidNotEngage(t *testing.T) {
	const ns = "fleet"
	leakcheck.Check(t)
	srv, kube := startServer(t, ns)
	f := idleFleet(t, ns)
	for _, name := range []string{"prod", "billing"} {
		if err := f.Engage(name, srv.Config()); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Engage("prod\xff", srv.Config()); err == nil {
		t.Error("Engage of a cluster name that is not UTF-8 succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran, provided := make(chan error, 1), make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	go func() { provided <- fleet.Secrets{Kube: kube, Namespace: ns}.Run(ctx, f) }()
	defer func() {
		cancel()
		for _, ch := range []chan error{ran, provided} {
			if err := <-ch; err != nil {
				t.Error(err)
			}
		}
	}()
	elsewhere, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"x": {Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"x": {Token: "attacker"}},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "x", AuthInfo: "x"}},
		CurrentContext: "x"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	secrets := kube.CoreV1().Secrets(ns)
	unchanged := func(when string) {
		t.Helper()
		for _, name := range []string{"prod", "billing"} {
			c, ok := f.Cluster(name)
			if !ok || c.Config().Host != srv.Config().Host || c.Config().BearerToken == "attacker" {
				t.Errorf("cluster %s %s: engaged %v, want it as the program engaged it", name, when, ok)
			}
		}
	}
	// The provider hears the Secrets in the order they changed: once it
	// engaged (then disengaged) its own cluster, whose Secret changes
	// last, it has handled the others' changes before.
	for _, s := range []struct {
		name  string
		value []byte
	}{{"prod", elsewhere}, {"billing", []byte("not a kubeconfig")}, {"mine", admin}} {
		if _, err := secrets.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.name + fleet.SecretSuffix},
			Data: map[string][]byte{"value": s.value}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the provider's own cluster engaged", func() bool { return f.Engaged("mine") })
	unchanged("after a kubeconfig Secret of its name was created")
	for _, name := range []string{"prod", "billing", "mine"} {
		if err := secrets.Delete(t.Context(), name+fleet.SecretSuffix, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the provider's own cluster disengaged with its Secret", func() bool { return !f.Engaged("mine") })
	unchanged("after the kubeconfig Secret of its name was deleted")
}

// A Secrets provider reads the naming of one's choice: with Suffix "-" and
// Key "kubeconfig" (multicluster-runtime's kubeconfig provider's Secrets,
// selected by a label), a Secret's name is its cluster's, and a Secret in
// Cluster API's naming is not a kubeconfig Secret to it.
func TestSecrets_readsTheNamingItIsGiven(t *testing.T) {
	const ns = "fleet"
	leakcheck.Check(t)
	srv, kube := startServer(t, ns)
	f := idleFleet(t, ns)
	admin, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	const label = "sigs.k8s.io/multicluster-runtime-kubeconfig"
	secrets := kube.CoreV1().Secrets(ns)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "east", Labels: map[string]string{label: "true"}}, Data: map[string][]byte{"kubeconfig": admin}},
		{ObjectMeta: metav1.ObjectMeta{Name: "west-kubeconfig", Labels: map[string]string{label: "true"}}, Data: map[string][]byte{"value": admin}},
		{ObjectMeta: metav1.ObjectMeta{Name: "north"}, Data: map[string][]byte{"kubeconfig": admin}}, // not selected
	} {
		if _, err := secrets.Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran, provided := make(chan error, 1), make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	go func() {
		provided <- fleet.Secrets{Kube: kube, Namespace: ns, LabelSelector: label + "=true", Suffix: "-", Key: "kubeconfig"}.Run(ctx, f)
	}()
	defer func() {
		cancel()
		for _, ch := range []chan error{ran, provided} {
			if err := <-ch; err != nil {
				t.Error(err)
			}
		}
	}()
	eventually(t, 30*time.Second, "east engaged", func() bool { return f.Engaged("east") })
	eventually(t, 30*time.Second, "west-kubeconfig refused: no kubeconfig under the key", func() bool {
		i := slices.IndexFunc(f.Refused(), func(s fleet.ClusterStatus) bool { return s.Name == "west-kubeconfig" })
		return i >= 0 && strings.Contains(f.Refused()[i].Err.Error(), `no kubeconfig under the Secret's key "kubeconfig"`)
	})
	if got := f.Clusters(); !slices.Equal(got, []string{"east"}) {
		t.Errorf("clusters %q, want [east]", got)
	}
	if err := secrets.Delete(t.Context(), "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "east disengaged with its Secret", func() bool { return !f.Engaged("east") })
}
