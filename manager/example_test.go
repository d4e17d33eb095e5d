package manager_test

import (
	"context"
	"flag"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
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
			Name: "pod-printer", Namespace: "kube-system", Identity: podName}})
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

// A controller program's whole main: flags (--kubeconfig, --http-addr and
// the program's own), the cluster as kubectl finds it, leader election, and
// a clean exit on SIGTERM. (Not run as a test: it runs until a signal;
// main_test.go runs it as a real process.)
func ExampleMain() {
	main := func() {
		greeting := flag.String("greeting", "hello", "what to print for each changed Pod")
		manager.Main(manager.Options{LeaderElection: election.Options{Name: "greeter"}}, func(m *manager.Manager) error {
			pods := manager.Informer[*corev1.Pod](m, manager.Scope{})
			rec := controller.ReconcileFunc[object.ObjectName](func(_ context.Context, name object.ObjectName) (controller.Result, error) {
				fmt.Println(*greeting, name)
				return controller.Result{}, nil
			})
			_, err := manager.NewController(m, "greeter", rec, manager.ControllerOptions{}, manager.For(pods))
			return err
		})
	}
	_ = main
}

// A finalizer that removes a ConfigMap's external record before the
// ConfigMap goes; the reconcile calls Finalize first. (Not run as a test:
// it needs a cluster; apply's tests run the finalizer on the real server.)
func ExampleFinalizer() {
	setup := func(m *manager.Manager) error {
		cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{LabelSelector: "external=true"})
		fin := manager.Finalizer(m, "example.com/external-record", func(_ context.Context, cm *corev1.ConfigMap) error {
			fmt.Println("deleting the external record of", cm.Name) // must be idempotent
			return nil
		})
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			cm, ok := cms.Reader().Get(name)
			if !ok {
				return controller.Result{}, nil
			}
			if stop, err := fin.Finalize(ctx, cm); stop || err != nil { // being deleted, or the finalizer just added
				return controller.Result{}, err
			}
			fmt.Println("creating or updating the external record of", cm.Name)
			return controller.Result{}, nil
		})
		_, err := manager.NewController(m, "external-records", rec, manager.ControllerOptions{}, manager.For(cms))
		return err
	}
	_ = setup
}

// A controller over the ConfigMaps of a set of tenant namespaces that
// grows and shrinks while it runs: a tenant onboarded is listed and
// watched alone, a tenant offboarded leaves the cache and its objects are
// reconciled as gone. (Not run as a test: it needs a cluster;
// namespaces_test.go runs the same wiring on the real API server.)
func ExampleInNamespaces() {
	run := func(ctx context.Context, cfg *rest.Config, tenants <-chan string, offboarded <-chan string) error {
		m, err := manager.New(cfg, manager.Options{})
		if err != nil {
			return err
		}
		set, err := manager.InNamespaces[*corev1.ConfigMap](m, manager.Scope{LabelSelector: "tenant-config=true"})
		if err != nil {
			return err
		}
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			if _, ok := set.Get(name); !ok {
				fmt.Println(name, "gone")
			}
			return controller.Result{}, nil
		})
		if _, err := manager.NewController(m, "tenant-config", rec, manager.ControllerOptions{}, set.For()); err != nil {
			return err
		}
		go func() {
			for {
				select {
				case ns := <-tenants:
					_ = set.Add(ns)
				case ns := <-offboarded:
					_ = set.Remove(ns)
				case <-ctx.Done():
					return
				}
			}
		}()
		return m.Run(ctx)
	}
	_ = run
}

// A set of namespaces driven by a label of the namespaces themselves: the
// Namespaces labelled team=true are the controller's For objects, and
// their reconcile adds each to the set of ConfigMap informers (or forgets
// it once the label is gone); the set is a Watches source, each ConfigMap
// queuing its namespace. A namespace just added is read only once it has
// synced, so that a write skipped on an unchanged cached object (as
// apply.Apply does) is not sent for want of a cache. (Not run as a test:
// it needs a cluster.)
func ExampleInNamespaces_drivenByANamespaceLabel() {
	run := func(ctx context.Context, cfg *rest.Config) error {
		m, err := manager.New(cfg, manager.Options{})
		if err != nil {
			return err
		}
		teams := manager.Informer[*corev1.Namespace](m, manager.Scope{LabelSelector: "team=true"})
		set, err := manager.InNamespaces[*corev1.ConfigMap](m, manager.Scope{FieldSelector: "metadata.name=team-defaults"})
		if err != nil {
			return err
		}
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			ns := name.Name // a Namespace's key has the name only
			if _, ok := teams.Reader().Get(name); !ok {
				return controller.Result{}, set.Forget(ns) // unlabelled or deleted: no longer watched, its ConfigMap left alone
			}
			if err := set.Add(ns); err != nil {
				return controller.Result{}, err
			}
			if !set.Synced(ns) {
				return controller.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			cm, ok := set.Get(object.ObjectName{Namespace: ns, Name: "team-defaults"})
			fmt.Println(ns, "team-defaults cached:", ok, cm != nil) // here: apply.Apply(ctx, client, set, desired, opts)
			return controller.Result{}, nil
		})
		byNamespace := func(cm *corev1.ConfigMap) []object.ObjectName {
			return []object.ObjectName{{Name: cm.Namespace}}
		}
		if _, err := manager.NewController(m, "team-config", rec, manager.ControllerOptions{},
			manager.For(teams), set.Watches(byNamespace)); err != nil {
			return err
		}
		return m.Run(ctx)
	}
	_ = run
}

// podPrinter is a reconciler written for one cluster: it holds that
// cluster's Pod reader.
type podPrinter struct {
	pods store.Reader[*corev1.Pod]
}

func (p *podPrinter) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	if pod, ok := p.pods.Get(name); ok {
		fmt.Println(name, pod.Status.Phase)
	}
	return controller.Result{}, nil
}

// The same single-cluster reconciler over every cluster whose kubeconfig
// Secret (as Cluster API writes them) is in the namespace "clusters" of
// the manager's cluster: fleet.PerCluster makes one per cluster, with that
// cluster's reader, and the fleet's one queue takes the clusters' keys in
// turns. (Not run as a test: it needs clusters; fleet_test.go runs the
// same wiring on the real API server.)
func ExampleNewFleet() {
	run := func(ctx context.Context, cfg *rest.Config) error {
		m, err := manager.New(cfg, manager.Options{})
		if err != nil {
			return err
		}
		var pods *fleet.Cache[*corev1.Pod]
		perCluster := fleet.PerCluster(func(c *fleet.Cluster) (controller.Reconciler[object.ObjectName], error) {
			r, _ := pods.Reader(c.Name())
			return &podPrinter{pods: r}, nil
		})
		f, err := manager.NewFleet(m, perCluster, fleet.Options{}, fleet.Secrets{Kube: m.Kube(), Namespace: "clusters"})
		if err != nil {
			return err
		}
		if pods, err = fleet.For[*corev1.Pod](f, fleet.Scope{LabelSelector: "app=web"}); err != nil {
			return err
		}
		return m.Run(ctx)
	}
	_ = run
}

// A controller set up by a function of its own, as kubebuilder's
// SetupWithManager: it cannot reach the manager's Options, so it names the
// field manager of its applies with KeepManagedFieldsOf, and apply.Apply
// sends nothing when the cached Secret already holds what it applies
// (a restart over unchanged objects writes nothing). (Not run as a test:
// it needs a cluster; manager_test.go runs the same wiring on the real API
// server.)
func ExampleManager_KeepManagedFieldsOf() {
	const fieldManager = "mirror"
	setup := func(m *manager.Manager) error {
		cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{LabelSelector: "mirror=true"})
		secrets := manager.Informer[*corev1.Secret](m, manager.Scope{LabelSelector: "mirrored=true"})
		rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
			cm, ok := cms.Reader().Get(name)
			if !ok {
				return controller.Result{}, nil
			}
			data := map[string][]byte{}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			cfg := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirrored": "true"}).WithData(data).
				WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
			_, _, err := apply.Apply(ctx, m.Kube().CoreV1().Secrets(cm.Namespace), secrets.Reader(), cfg,
				metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
			return controller.Result{}, err
		})
		m.KeepManagedFieldsOf(fieldManager)
		_, err := manager.NewController(m, "mirror", rec, manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets))
		return err
	}
	run := func(ctx context.Context, cfg *rest.Config) error {
		m, err := manager.New(cfg, manager.Options{})
		if err != nil {
			return err
		}
		if err := setup(m); err != nil {
			return err
		}
		return m.Run(ctx)
	}
	_ = run
}
