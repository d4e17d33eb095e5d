package apiserver

import (
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// With Options.Controllers the server runs the garbage collector and the
// namespace controller: a deleted owner's dependent goes (background
// propagation), an orphaned one stays without its owner reference, and a
// deleted namespace is emptied and goes.
func TestServer_controllersCascadeOwnerReferencesAndDeleteNamespaces(t *testing.T) {
	leakcheck.Check(t)
	srv, err := Start(t.Context(), Options{Controllers: true, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	cs := Client(t, srv.Config())
	ns := srv.Namespace(t)
	ctx := t.Context()
	child := func(name string, owner *corev1.ConfigMap) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: []metav1.OwnerReference{
			*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}}
		s, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	owner := func(name string) *corev1.ConfigMap {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	eventuallyTrue := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 60s: %s", what)
			}
			time.Sleep(100 * time.Millisecond) // polling a real server, not synchronising goroutines
		}
	}

	cascaded, orphaned := owner("cascaded"), owner("orphaned")
	child("of-cascaded", cascaded)
	child("of-orphaned", orphaned)
	start := time.Now()
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cascaded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := metav1.DeletePropagationOrphan
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "orphaned", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue("the deleted owner's dependent collected", func() bool {
		_, err := cs.CoreV1().Secrets(ns).Get(ctx, "of-cascaded", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	t.Logf("the dependent was collected %v after its owner's delete", time.Since(start).Round(time.Millisecond))
	eventuallyTrue("the orphan's owner reference removed", func() bool {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, "of-orphaned", metav1.GetOptions{})
		return err == nil && len(s.OwnerReferences) == 0
	})

	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue("the deleted namespace emptied and gone", func() bool {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
