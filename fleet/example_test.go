package fleet_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
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

// Replicas of a ring share the fleet's clusters; one cluster is too big
// for a single replica, so every replica engages it and reconciles only
// the share of its objects whose keys fall in the ring's shards it holds
// (and caches only those, with the objects they control). Spread without
// a ring is refused.
func ExampleOptions_spread() {
	rec := controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	})
	_, err := fleet.New(rec, fleet.Options{Spread: []string{"prod-big"}})
	fmt.Println(err)

	management := &rest.Config{Host: "https://management.example:6443"} // where the ring's Leases live
	f, err := fleet.New(rec, fleet.Options{
		Ring:       shard.Ring{Name: "mirror", Namespace: "ring", Identity: "replica-0"},
		RingConfig: management,
		Spread:     []string{"prod-big"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Here()) // nothing engaged before Run and a provider
	// Output:
	// fleet: Options.Spread needs Options.Ring (the replicas to spread the clusters' objects over)
	// []
}

// A fleet's scope changes while it runs: a source added after a cluster is
// engaged gets an informer there at once, and Remove takes it away from
// every cluster. (The fleet is not run here, so no server is called.)
func ExampleCache_Remove() {
	rec := controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	})
	f, err := fleet.New(rec, fleet.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	informers := func() {
		var names []string
		for _, i := range f.DebugSource().State().Informers {
			names = append(names, i.Name)
		}
		fmt.Println(strings.Join(names, ", "))
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: "apps"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := f.Engage("prod", &rest.Config{Host: "https://prod.example:6443"}); err != nil {
		fmt.Println(err)
		return
	}
	informers()
	// Secrets of namespace "apps" now queue the ConfigMap of their name.
	secrets, err := fleet.Watches(f, fleet.Scope{Namespace: "apps"}, func(s *corev1.Secret) []object.ObjectName {
		return []object.ObjectName{object.NameOf(s)}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	informers()
	if err := secrets.Remove(); err != nil {
		fmt.Println(err)
		return
	}
	informers()
	_ = f.Disengage("prod")
	// Output:
	// prod: ConfigMap
	// prod: ConfigMap, prod: Secret
	// prod: ConfigMap
}
