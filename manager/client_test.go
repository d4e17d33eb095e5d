package manager_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// laggingCache is a cache, as the ledger sees it, that never shows any
// object: every write recorded for it stays pending.
var laggingCache = ledger.Cache{Lookup: func(object.ObjectName) (string, bool) { return "", false }}

func TestClient_writesInAReconcileAreRecordedByTheLedger(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	installGizmoCRD(t, srv.Config())
	leakcheck.Check(t)
	opts := quiet(t)
	opts.AddToScheme = append(opts.AddToScheme, addGizmo)
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Secrets (protobuf) and gizmos (JSON) written through the clients are
	// waited for by caches that never catch up, so each write stays recorded.
	m.Ledger().Track(schema.GroupResource{Resource: "secrets"}, laggingCache)
	m.Ledger().Track(schema.GroupResource{Group: gizmoGV.Group, Resource: "gizmos"}, laggingCache)
	secrets := manager.Client[*corev1.Secret](m)
	if manager.Client[*corev1.Secret](m) != secrets {
		t.Error("two calls of Client for one type returned two clients")
	}
	gizmos := manager.Client[*gizmo](m)
	eventually(t, 30*time.Second, "gizmos served", func() bool {
		_, err := gizmos.List(t.Context(), ns, metav1.ListOptions{})
		return err == nil
	})

	if _, err := secrets.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "outside", Namespace: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := recorded(t, m); n != 0 {
		t.Fatalf("a write outside a reconcile recorded %v writes, want 0", n)
	}

	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	var done atomic.Bool
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		if done.Load() {
			return controller.Result{}, nil
		}
		child := object.ObjectName{Namespace: name.Namespace, Name: name.Name + "-child"}
		if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: child.Name, Namespace: ns}},
			metav1.CreateOptions{}); err != nil {
			return controller.Result{}, err
		}
		if _, err := gizmos.Create(ctx, &gizmo{ObjectMeta: metav1.ObjectMeta{Name: child.Name, Namespace: ns}},
			metav1.CreateOptions{}); err != nil {
			return controller.Result{}, err
		}
		done.Store(true)
		return controller.Result{}, nil
	})
	if _, err := manager.NewController(m, "writer", rec, manager.ControllerOptions{ReadYourWrites: true}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the reconcile's two writes recorded", func() bool { return recorded(t, m) == 2 })
	if n := m.Ledger().Pending(); n != 1 {
		t.Errorf("%d owners with pending writes, want 1 (the ConfigMap)", n)
	}
}

// recorded returns how many writes the ledger of m has recorded.
func recorded(t *testing.T, m *manager.Manager) float64 {
	t.Helper()
	n, err := metrics.Sum(m.Registry(), "ctrlkit_ledger_writes_waited_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestClient_aTypeOutsideTheSchemeFailsRunAndEveryCall(t *testing.T) {
	srv := env.Get(t)
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	foos := manager.Client[*v1alpha1.Foo](m)
	if _, err := foos.Get(t.Context(), object.ObjectName{Namespace: "a", Name: "b"}); err == nil ||
		!strings.Contains(err.Error(), "AddToScheme") {
		t.Errorf("Get of an unregistered type: %v, want an error pointing at AddToScheme", err)
	}
	if err := m.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "AddToScheme") {
		t.Errorf("Run after Client of an unregistered type: %v, want an error pointing at AddToScheme", err)
	}
}

// gizmo is a custom resource of these tests alone (the Foo CRD must stay
// uninstalled for TestManager_aMissingCRDStopsOnlyItsOwnController).
type (
	gizmo struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
	}
	gizmoList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []gizmo `json:"items"`
	}
)

var gizmoGV = schema.GroupVersion{Group: "gizmos.manager.ctrlkit.dev", Version: "v1"}

func (g *gizmo) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func (l *gizmoList) DeepCopyObject() runtime.Object {
	out := &gizmoList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*gizmo))
	}
	return out
}

func addGizmo(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(gizmoGV.WithKind("Gizmo"), &gizmo{})
	s.AddKnownTypeWithName(gizmoGV.WithKind("GizmoList"), &gizmoList{})
	metav1.AddToGroupVersion(s, gizmoGV)
	return nil
}

// installGizmoCRD installs the CRD of gizmo, or leaves it if present.
func installGizmoCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos." + gizmoGV.Group},
		"spec": map[string]any{
			"group": gizmoGV.Group, "scope": "Namespaced",
			"names": map[string]any{"kind": "Gizmo", "listKind": "GizmoList", "plural": "gizmos", "singular": "gizmo"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
