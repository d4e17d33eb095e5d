package client_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// Write a ConfigMap through the manager's client on a real API server:
// server-side apply, an update, a stale update that conflicts, a delete.
func Example() {
	ctx := context.TODO() // a test would use t.Context()
	srv, err := apiserver.Start(ctx, apiserver.Options{})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer srv.Stop()
	m, err := manager.New(srv.Config(), manager.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	cms := manager.Client[*corev1.ConfigMap](m)

	name := object.ObjectName{Namespace: "default", Name: "settings"}
	cm, err := cms.Apply(ctx, corev1ac.ConfigMap(name.Name, name.Namespace).WithData(map[string]string{"mode": "fast"}),
		metav1.ApplyOptions{FieldManager: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("applied:", cm.Data["mode"])

	changed := cm.DeepCopy()
	changed.Data["mode"] = "slow"
	if _, err := cms.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{}) // cm's resource version is stale now
	fmt.Println("stale update is a conflict:", apierrors.IsConflict(err))

	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = cms.Get(ctx, name)
	fmt.Println("gone:", apierrors.IsNotFound(err))
	// Output:
	// applied: fast
	// stale update is a conflict: true
	// gone: true
}

// Write the status of a custom resource, a Foo, from a reconciler, with
// server-side apply: Foo has no generated apply configuration, so the
// typed object goes through ApplyObject; ApplyStatus applies only its
// status, whose fields this controller then owns. (Not run: it needs the
// Foo CRD; the package's tests run the same calls on the real API server.)
func ExampleApplyObject() {
	run := func(ctx context.Context, cfg *rest.Config, name object.ObjectName, available int32) error {
		m, err := manager.New(cfg, manager.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
		if err != nil {
			return err
		}
		foos := manager.Client[*v1alpha1.Foo](m)
		status := &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: name.Name, Namespace: name.Namespace}}
		status.Status.AvailableReplicas = available
		foo, err := foos.ApplyStatus(ctx, client.ApplyObject(status), metav1.ApplyOptions{FieldManager: "foo-controller", Force: true})
		if err != nil {
			return err
		}
		fmt.Println(foo.Status.AvailableReplicas)
		return nil
	}
	_ = run
}
