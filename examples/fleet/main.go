// Command fleet keeps a Secret beside every ConfigMap labelled mirror=true,
// with the same data and owned by it, in every cluster of a fleet: the
// clusters whose kubeconfig Secrets (as Cluster API writes them,
// "<cluster>-kubeconfig" with the kubeconfig under "value") are in the
// namespace "clusters" of the management cluster KUBECONFIG names. A
// Secret added engages its cluster, one deleted disengages it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
)

// Mirror writes the Secret of one ConfigMap in the ConfigMap's cluster.
type Mirror struct {
	ConfigMaps *fleet.Cache[*corev1.ConfigMap]
}

func (m *Mirror) Reconcile(ctx context.Context, k fleet.Key) (controller.Result, error) {
	cm, ok := m.ConfigMaps.Get(k) // k.Cluster names the cluster, k.ObjectName the ConfigMap
	if !ok {
		return controller.Result{}, nil // deleted: the cluster's garbage collector deletes its Secret
	}
	data := map[string][]byte{}
	for key, v := range cm.Data {
		data[key] = []byte(v)
	}
	secret := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirrored": "true"}).WithData(data).
		WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	cluster, _ := fleet.ClusterFrom(ctx) // the cluster of k: clients that share the fleet's connections to it
	_, err := fleet.Client[*corev1.Secret](cluster).Apply(ctx, secret, metav1.ApplyOptions{FieldManager: "fleet-mirror", Force: true})
	return controller.Result{}, err
}

// New returns the fleet of the mirror: its ConfigMaps and the Secrets it
// owns, in every cluster it will engage.
func New() (*fleet.Fleet, error) {
	m := &Mirror{}
	f, err := fleet.New(m, fleet.Options{})
	if err != nil {
		return nil, err
	}
	if m.ConfigMaps, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{LabelSelector: "mirror=true"}); err != nil {
		return nil, err
	}
	if _, err := fleet.Owns[*corev1.Secret](f, fleet.Scope{LabelSelector: "mirrored=true"}); err != nil {
		return nil, err
	}
	return f, nil
}

// Run runs the mirror over the clusters whose kubeconfig Secrets
// management holds in namespace, until ctx ends.
func Run(ctx context.Context, management kubernetes.Interface, namespace string) error {
	f, err := New()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Run(ctx) })
	g.Go(func() error { return fleet.Secrets{Kube: management, Namespace: namespace}.Run(ctx, f) })
	return g.Wait()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err == nil {
		var kube kubernetes.Interface
		if kube, err = kubernetes.NewForConfig(cfg); err == nil {
			err = Run(ctx, kube, "clusters")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}
