package fleet_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
)

// One controller over every cluster whose kubeconfig is in a folder: it
// prints each ConfigMap of namespace "apps" that changes, in whichever
// cluster. (Not run as a test: it needs clusters; fleet_test.go runs the
// same wiring over two real API servers.)
func ExampleFleet() {
	run := func(ctx context.Context) error {
		var cms *fleet.Cache[*corev1.ConfigMap]
		f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(_ context.Context, k fleet.Key) (controller.Result, error) {
			if cm, ok := cms.Get(k); ok {
				fmt.Println(k, len(cm.Data), "keys")
			}
			return controller.Result{}, nil
		}), fleet.Options{})
		if err != nil {
			return err
		}
		if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: "apps"}); err != nil {
			return err
		}
		go func() {
			if err := (fleet.Directory{Path: "/etc/clusters"}).Run(ctx, f); err != nil {
				log.Print(err)
			}
		}()
		return f.Run(ctx)
	}
	_ = run
}
