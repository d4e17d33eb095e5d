package crcompat

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

func TestGreeter_onTheEmbeddedAPIServer(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{}) // kube-apiserver and etcd, stopped when t ends
	ns := srv.Namespace(t)

	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(srv.Config(), ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	greet := reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, req.NamespacedName, &cm); err != nil || cm.Data["greeting"] != "" {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		cm.Data = map[string]string{"greeting": "Hello, " + cm.Name + "!"}
		return ctrl.Result{}, c.Update(ctx, &cm)
	})
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(greet); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "world", Namespace: ns}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := mgr.GetAPIReader().Get(ctx, types.NamespacedName{Namespace: ns, Name: "world"}, cm)
		return err == nil && cm.Data["greeting"] == "Hello, world!", err
	})
	if err != nil {
		t.Fatalf("no greeting: %v", err)
	}
}
