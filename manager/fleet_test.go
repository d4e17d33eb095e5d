package manager_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// TestNewFleet_runsASingleClusterReconcilerOverEveryClusterWithTheManager:
// the single-cluster mirror reconciler, unchanged, made per cluster by
// fleet.PerCluster, runs over two clusters a provider engages (two names
// for the test's API server, so each has its own cache), with the
// manager: its /readyz, its /metrics, its debug page.
func TestNewFleet_runsASingleClusterReconcilerOverEveryClusterWithTheManager(t *testing.T) {
	m, srv, ns := quietManager(t)
	var cms *fleet.Cache[*corev1.ConfigMap]
	var mu sync.Mutex
	made := map[string]*mirror{} // by cluster
	newRec := func(c *fleet.Cluster) (controller.Reconciler[object.ObjectName], error) {
		kube, err := c.Kube()
		if err != nil {
			return nil, err
		}
		r, _ := cms.Reader(c.Name())
		rec := &mirror{cms: r.Get, kube: kube}
		mu.Lock()
		defer mu.Unlock()
		if made[c.Name()] != nil {
			t.Errorf("cluster %s: a second reconciler made", c.Name())
		}
		made[c.Name()] = rec
		return rec, nil
	}
	engage := fleet.ProviderFunc(func(ctx context.Context, f *fleet.Fleet) error {
		for _, name := range []string{"east", "west"} {
			if err := f.Engage(name, srv.Config()); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return nil
	})
	f, err := manager.NewFleet(m, fleet.PerCluster(newRec), fleet.Options{}, engage)
	if err != nil {
		t.Fatal(err)
	}
	if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "both clusters' reconcilers reconcile the ConfigMap, and its Secret is written", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(made) != 2 || made["east"].count.Load() == 0 || made["west"].count.Load() == 0 {
			return false
		}
		s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), "a", metav1.GetOptions{})
		return err == nil && string(s.Data["k"]) == "v"
	})
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d:\n%s", code, body)
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{`ctrlkit_fleet_clusters{fleet="fleet"} 2`, `ctrlkit_fleet_cluster_synced{cluster="east",fleet="fleet"} 1`,
		`ctrlkit_fleet_reconciles_total{cluster="west",fleet="fleet",result="success"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	var st debug.State
	if code := getJSON(t, base+debug.Path+"/state.json", &st); code != 200 {
		t.Fatalf("state.json: %d", code)
	}
	var informers []string
	for _, inf := range st.Informers {
		informers = append(informers, inf.Name)
	}
	if len(st.Controllers) != 1 || st.Controllers[0].Name != "fleet" || len(informers) != 2 {
		t.Errorf("debug page: controllers %+v, informers %v; want the fleet's controller and an informer per cluster", st.Controllers, informers)
	}
	var e debug.Explanation
	if code := getJSON(t, base+debug.Path+"/explain?controller=fleet&key=west/"+ns+"/a", &e); code != 200 {
		t.Fatalf("explain west/%s/a: %d", ns, code)
	}
	if e.Key != "west/"+ns+"/a" || !e.Cached || e.Informer != "west: ConfigMap" || e.ResourceVersion == "" || !e.Known {
		t.Errorf("explain west/%s/a = %+v; want it cached in west's ConfigMap informer", ns, e)
	}
	for _, bad := range []string{"west", "/" + ns + "/a", "west/" + ns + "/"} {
		if code, body := get(t, base+debug.Path+"/explain?controller=fleet&key="+bad); code != 400 || !strings.Contains(body, "cluster/namespace/name") {
			t.Errorf("explain %q = %d %s; want 400 naming the key's form", bad, code, body)
		}
	}
}

// fleetNop is a fleet reconciler that does nothing.
var fleetNop = controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
	return controller.Result{}, nil
})

// A fleet's controller name is one of the manager's: NewFleet refuses a
// name a controller has, and NewController one a fleet has.
func TestNewFleet_refusesANameTheManagerHas(t *testing.T) {
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, quiet(t)) // makes no request
	if err != nil {
		t.Fatal(err)
	}
	nop := controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
		return controller.Result{}, nil
	})
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{})
	if _, err := manager.NewController(m, "mirror", nop, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.NewFleet(m, fleetNop, fleet.Options{Controller: controller.Options[fleet.Key]{Name: "mirror"}}); !errors.Is(err, manager.ErrDuplicateName) {
		t.Errorf("NewFleet named as a controller: %v, want ErrDuplicateName", err)
	}
	if _, err := manager.NewFleet(m, fleetNop, fleet.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.NewController(m, "fleet", nop, manager.ControllerOptions{}, manager.For(cms)); !errors.Is(err, manager.ErrDuplicateName) {
		t.Errorf("NewController named as the fleet: %v, want ErrDuplicateName", err)
	}
}

// A fleet.Secrets provider of every namespace is refused before the
// manifests could grant it every Secret: a Secret a tenant writes in its
// own namespace would otherwise engage a cluster, or redirect one.
func TestNewFleet_refusesSecretsOfEveryNamespace(t *testing.T) {
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, quiet(t)) // makes no request
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1"})
	_, err = manager.NewFleet(m, fleetNop, fleet.Options{}, fleet.Secrets{Kube: kube})
	if err == nil || !strings.Contains(err.Error(), "Namespace is required") {
		t.Fatalf("NewFleet with fleet.Secrets of every namespace: %v, want Namespace is required", err)
	}
	if err := (fleet.Secrets{Kube: kube}).Run(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "Namespace is required") {
		t.Errorf("Run of fleet.Secrets of every namespace: %v, want Namespace is required", err)
	}
	if _, err := manager.NewFleet(m, fleetNop, fleet.Options{}, fleet.Secrets{Kube: kube, Namespace: "clusters"}); err != nil {
		t.Errorf("NewFleet with fleet.Secrets of one namespace: %v", err)
	}
}

// A fleet.Secrets provider that cannot list its Secrets (no RBAC) keeps
// /readyz failing with the reason, rather than looking idle and ready with
// no cluster; the manifests grant what it reads.
func TestNewFleet_aSecretsProviderThatCannotListSaysSoOnReadyzAndTheManifestsGrantIt(t *testing.T) {
	m, srv, ns := quietManager(t)
	limited := rest.CopyConfig(srv.Config())
	limited.Impersonate = rest.ImpersonationConfig{UserName: "no-secrets-" + ns}
	kube := apiserver.Client(t, limited)
	f, err := manager.NewFleet(m, fleetNop, fleet.Options{Controller: controller.Options[fleet.Key]{Name: "kubeconfigs"}},
		fleet.Secrets{Kube: kube, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	out, err := m.Manifests(manager.ManifestOptions{Name: "op", Image: "example.com/op:v1"})
	if err != nil {
		t.Fatal(err)
	}
	if !grants(t, out, ns, "", "secrets", "list", "watch") {
		t.Errorf("the manifests grant no list and watch of secrets in namespace %s:\n%s", ns, out)
	}
	base := start(t, m)
	eventually(t, 30*time.Second, "/readyz failing, naming the provider's Secrets and the refusal", func() bool {
		code, body := get(t, base+"/readyz?verbose")
		return code == 503 && strings.Contains(body, "kubeconfig Secrets in namespace "+ns) && strings.Contains(body, "forbidden")
	})
}

// grants reports whether the manifests' RBAC of the program called op
// allows every verb on resource (in the core group or group) in ns: in its
// ClusterRole, or for ns != "" in its Role of ns.
func grants(t *testing.T, manifests []byte, ns, group, resource string, verbs ...string) bool {
	t.Helper()
	var rules []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(manifests), "\n---\n") {
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		if (head.Kind == "ClusterRole" && head.Metadata.Name == "op") ||
			(head.Kind == "Role" && ns != "" && head.Metadata.Namespace == ns) {
			var role rbacv1.ClusterRole // a Role's rules decode alike
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				t.Fatal(err)
			}
			rules = append(rules, role.Rules...)
		}
	}
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
			!slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) })
	})
}

// The clusters' caches take the manager's Options.Informers: a field
// manager named in KeepManagedFieldsOf keeps its managedFields entry in
// every cluster's cache, so apply.Apply can tell a write that would change
// nothing (NewFleet gave them no options, and every apply was sent).
func TestNewFleet_givesTheClustersCachesTheManagersInformerOptions(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	opts := quiet(t)
	opts.Informers.KeepManagedFieldsOf = []string{"fleet-test"}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	engage := fleet.ProviderFunc(func(ctx context.Context, f *fleet.Fleet) error {
		if err := f.Engage("east", srv.Config()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	f, err := manager.NewFleet(m, fleetNop, fleet.Options{}, engage)
	if err != nil {
		t.Fatal(err)
	}
	cms, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().ConfigMaps(ns).Apply(t.Context(), corev1ac.ConfigMap("a", ns).WithData(map[string]string{"k": "v"}),
		metav1.ApplyOptions{FieldManager: "fleet-test"}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	eventually(t, 30*time.Second, "east's cached ConfigMap with the fleet-test entry of its managedFields", func() bool {
		r, ok := cms.Reader("east")
		if !ok {
			return false
		}
		cm, ok := r.Get(object.ObjectName{Namespace: ns, Name: "a"})
		return ok && slices.ContainsFunc(cm.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "fleet-test" })
	})
}

// clusterTable is a provider of one's own that reads its clusters from
// ConfigMaps of the management cluster, and says so (fleet.Watcher).
type clusterTable struct{ fleet.ProviderFunc }

func (clusterTable) Watches() []fleet.Watched {
	return []fleet.Watched{{Resource: "configmaps", Namespace: "clusters"}}
}

// A provider of one's own that is a fleet.Watcher has what it watches in
// the manifests, as the Secrets provider has.
func TestNewFleet_grantsWhatAWatcherProviderWatches(t *testing.T) {
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, quiet(t)) // makes no request
	if err != nil {
		t.Fatal(err)
	}
	idle := clusterTable{func(ctx context.Context, _ *fleet.Fleet) error { <-ctx.Done(); return nil }}
	if _, err := manager.NewFleet(m, fleetNop, fleet.Options{}, idle); err != nil {
		t.Fatal(err)
	}
	out, err := m.Manifests(manager.ManifestOptions{Name: "op", Image: "example.com/op:v1"})
	if err != nil {
		t.Fatal(err)
	}
	if !grants(t, out, "clusters", "", "configmaps", "list", "watch") {
		t.Errorf("the manifests grant no list and watch of configmaps in namespace clusters:\n%s", out)
	}
}
