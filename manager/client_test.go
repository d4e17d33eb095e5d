package manager_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
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
	if err := config.InstallCRD(t.Context(), srv.Config()); err != nil {
		t.Fatal(err)
	}
	leakcheck.Check(t)
	opts := quiet(t)
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Secrets (protobuf) and Foos (JSON) written through the clients are
	// waited for by caches that never catch up, so each write stays recorded.
	m.Ledger().Track(schema.GroupResource{Resource: "secrets"}, laggingCache)
	m.Ledger().Track(schema.GroupResource{Group: "samplecontroller.ctrlkit.dev", Resource: "foos"}, laggingCache)
	secrets := manager.Client[*corev1.Secret](m)
	if manager.Client[*corev1.Secret](m) != secrets {
		t.Error("two calls of Client for one type returned two clients")
	}
	foos := manager.Client[*v1alpha1.Foo](m)

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
		one := int32(1)
		if _, err := foos.Create(ctx, &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: child.Name, Namespace: ns},
			Spec: v1alpha1.FooSpec{DeploymentName: "d", Replicas: &one}}, metav1.CreateOptions{}); err != nil {
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
