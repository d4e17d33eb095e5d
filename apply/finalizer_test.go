package apply_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/object"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// configMaps patches ConfigMaps through the clientset.
type configMaps struct{ kube kubernetes.Interface }

func (c configMaps) Patch(ctx context.Context, n object.ObjectName, pt types.PatchType, data []byte,
	opts metav1.PatchOptions) (*corev1.ConfigMap, error) {
	return c.kube.CoreV1().ConfigMaps(n.Namespace).Patch(ctx, n.Name, pt, data, opts)
}

const finalizerName = "test.ctrlkit.dev/cleanup"

func TestFinalizer_addThenCleanUpOnDeleteThenRemove(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	cms := kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns,
		Finalizers: []string{"other.example.com/keep"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failures := 2
	var cleaned []string
	f, err := apply.NewFinalizer(finalizerName, configMaps{kube}, func(_ context.Context, cm *corev1.ConfigMap) error {
		if failures > 0 {
			failures--
			return errors.New("the external resource is busy")
		}
		cleaned = append(cleaned, cm.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Alive: the finalizer is added beside the other controller's, and the
	// reconcile stops (the object in hand is behind the server now).
	if stop, err := f.Finalize(ctx, cm); !stop || err != nil {
		t.Fatalf("Finalize adding the finalizer = %v, %v; want true, nil", stop, err)
	}
	cm = get(t, kube, ns, "site")
	if want := []string{"other.example.com/keep", finalizerName}; !slices.Equal(cm.Finalizers, want) {
		t.Fatalf("finalizers = %q, want %q", cm.Finalizers, want)
	}
	rv := cm.ResourceVersion
	if stop, err := f.Finalize(ctx, cm); stop || err != nil { // present: nothing to write, go on
		t.Fatalf("second Finalize = %v, %v; want false, nil", stop, err)
	}
	if got := get(t, kube, ns, "site").ResourceVersion; got != rv {
		t.Errorf("a Finalize with the finalizer present wrote the object (resource version %s -> %s)", rv, got)
	}

	// Deleted: the server keeps it while the cleanup fails, and the finalizer stays.
	if err := cms.Delete(ctx, "site", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cm = get(t, kube, ns, "site")
		stop, err := f.Finalize(ctx, cm)
		if !stop || err == nil || !strings.Contains(err.Error(), "the external resource is busy") {
			t.Fatalf("Finalize with a failing cleanup = %v, %v; want true and the cleanup's error", stop, err)
		}
		if !slices.Contains(get(t, kube, ns, "site").Finalizers, finalizerName) {
			t.Fatal("the finalizer was removed although the cleanup failed")
		}
	}
	cm = get(t, kube, ns, "site")
	if stop, err := f.Finalize(ctx, cm); !stop || err != nil {
		t.Fatalf("Finalize with a cleanup that succeeds = %v, %v; want true, nil", stop, err)
	}
	if !slices.Equal(cleaned, []string{"site"}) {
		t.Errorf("cleanups ran for %q, want once for site", cleaned)
	}
	cm = get(t, kube, ns, "site") // the other finalizer keeps it
	if !slices.Equal(cm.Finalizers, []string{"other.example.com/keep"}) {
		t.Fatalf("finalizers after cleanup = %q, want only the other controller's", cm.Finalizers)
	}
	if stop, err := f.Finalize(ctx, cm); !stop || err != nil || len(cleaned) != 1 {
		t.Fatalf("Finalize after removal = %v, %v (cleanups %d); want true, nil, no second cleanup", stop, err, len(cleaned))
	}

	// The other finalizer goes: so does the object.
	if _, err := cms.Patch(ctx, "site", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "site", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Get after every finalizer is off = %v, want NotFound", err)
	}
}

func TestFinalizer_aStaleReadIsAConflictNotADuplicate(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	stale, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "site",
		Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := apply.NewFinalizer(finalizerName, configMaps{kube}, func(context.Context, *corev1.ConfigMap) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if stop, err := f.Finalize(ctx, stale); !stop || err != nil {
		t.Fatalf("Finalize adding the finalizer = %v, %v; want true, nil", stop, err)
	}
	// A cache that has not seen the add yet hands the reconcile the old object.
	_, err = f.Finalize(ctx, stale)
	if !apierrors.IsConflict(err) {
		t.Fatalf("Finalize on a stale object = %v, want a conflict", err)
	}
	if got := get(t, kube, ns, "site").Finalizers; !slices.Equal(got, []string{finalizerName}) {
		t.Errorf("finalizers = %q, want it once", got)
	}
	// Deleted while the reconcile holds the live copy: the removal must not use it.
	live := get(t, kube, ns, "site")
	if err := kube.CoreV1().ConfigMaps(ns).Delete(ctx, "site", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if stop, err := f.Finalize(ctx, live); stop || err != nil {
		t.Fatalf("Finalize on the pre-delete copy = %v, %v; want false, nil (nothing to write)", stop, err)
	}
	if got := get(t, kube, ns, "site"); !slices.Contains(got.Finalizers, finalizerName) || got.DeletionTimestamp == nil {
		t.Errorf("after a Finalize on an old copy the object is %v with finalizers %q", got.DeletionTimestamp, got.Finalizers)
	}
}

func TestNewFinalizer_refusesNamesTheServerWouldNot(t *testing.T) {
	noop := func(context.Context, *corev1.ConfigMap) error { return nil }
	for _, name := range []string{"", "cleanup", "example.com/", "Example Com/cleanup", "example.com/a/b"} {
		f, err := apply.NewFinalizer(name, configMaps{}, noop)
		if err == nil || !strings.Contains(err.Error(), "domain-qualified") {
			t.Errorf("NewFinalizer(%q) = %v, want an error asking for a domain-qualified name", name, err)
		}
		if stop, ferr := f.Finalize(t.Context(), &corev1.ConfigMap{}); !stop || ferr != err {
			t.Errorf("Finalize of the Finalizer NewFinalizer(%q) refused = %v, %v; want true and NewFinalizer's error", name, stop, ferr)
		}
	}
	if _, err := apply.NewFinalizer(finalizerName, configMaps{}, noop); err != nil {
		t.Errorf("NewFinalizer(%q) = %v", finalizerName, err)
	}
}

func get(t *testing.T, kube kubernetes.Interface, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}
