package manager_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// A controller that prints the name of every Pod labelled app=web that
// changes, with metrics and probes on 127.0.0.1:8080. (Not run as a test:
// it needs a cluster; manager_test.go runs the same wiring on the real API
// server.)
func ExampleNewController() {
	run := func(ctx context.Context, cfg *rest.Config) error {
		m, err := manager.New(cfg, manager.Options{})
		if err != nil {
			return err
		}
		pods := manager.Informer[*corev1.Pod](m, manager.Scope{LabelSelector: "app=web"})
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			if pod, ok := pods.Reader().Get(name); ok {
				fmt.Println(name, pod.Status.Phase)
			}
			return controller.Result{}, nil
		})
		if _, err := manager.NewController(m, "web-pods", rec, manager.ControllerOptions{}, manager.For(pods)); err != nil {
			return err
		}
		return m.Run(ctx)
	}
	_ = run
}

// Every replica of a Deployment runs this: the replicas share the Pods'
// names between them (64 hash ranges of the namespace), each listing,
// watching and caching only its share, filtered by the API server. (Not
// run as a test: it needs a cluster; shard_test.go runs the same wiring in
// real replica processes.)
func ExampleSharding() {
	run := func(ctx context.Context, cfg *rest.Config, podName string) error {
		m, err := manager.New(cfg, manager.Options{Sharding: manager.Sharding{
			Ring: "pod-printer", Namespace: "kube-system", Identity: podName}})
		if err != nil {
			return err
		}
		pods := manager.Informer[*corev1.Pod](m, manager.Scope{})
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			if pod, ok := pods.Reader().Get(name); ok {
				fmt.Println(name, pod.Status.Phase) // only names of this replica's shards arrive here
			}
			return controller.Result{}, nil
		})
		if _, err := manager.NewController(m, "pod-printer", rec, manager.ControllerOptions{}, manager.For(pods)); err != nil {
			return err
		}
		return m.Run(ctx)
	}
	_ = run
}
