// Command fleet keeps a Secret beside every ConfigMap labelled mirror=true,
// with the same data and owned by it, in every cluster of a fleet: the
// clusters whose kubeconfig Secrets (as Cluster API writes them,
// "<cluster>-kubeconfig" with the kubeconfig under "value") are in the
// namespace "clusters" of the management cluster it runs against. A
// Secret added engages its cluster, one deleted disengages it. It is a
// manager's program: --kubeconfig names the management cluster,
// --manifests prints what it needs there (its RBAC reads those Secrets).
package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/manager"
)

// fieldManager names the mirror's writes; the clusters' caches keep its
// entry of managedFields, so apply.Apply can tell a write that would
// change nothing.
const fieldManager = "fleet-mirror"

// Mirror writes the Secret of one ConfigMap in the ConfigMap's cluster,
// unless the cached Secret already holds it.
type Mirror struct {
	ConfigMaps *fleet.Cache[*corev1.ConfigMap]
	Secrets    *fleet.Cache[*corev1.Secret]
}

func (m *Mirror) Reconcile(ctx context.Context, k fleet.Key) (controller.Result, error) {
	cm, ok := m.ConfigMaps.Get(k) // k.Cluster names the cluster, k.ObjectName the ConfigMap
	if !ok {
		return controller.Result{}, nil // deleted: the cluster's garbage collector deletes its Secret
	}
	secrets, ok := m.Secrets.Reader(k.Cluster)
	if !ok {
		return controller.Result{}, nil // the cluster has just left the fleet
	}
	data := map[string][]byte{}
	for key, v := range cm.Data {
		data[key] = []byte(v)
	}
	secret := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirrored": "true"}).WithData(data).
		WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	cluster, _ := fleet.ClusterFrom(ctx) // the cluster of k: clients that share the fleet's connections to it
	_, _, err := apply.Apply(ctx, fleet.Client[*corev1.Secret](cluster), secrets, secret,
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true}) // no request when the cached Secret holds it
	return controller.Result{}, err
}

// Setup adds the mirror's fleet to m: its ConfigMaps and the Secrets it
// owns, in every cluster whose kubeconfig Secret is in namespace of m's
// cluster (the management cluster).
func Setup(m *manager.Manager, namespace string) (*fleet.Fleet, error) {
	m.KeepManagedFieldsOf(fieldManager) // in every cluster's caches too
	mirror := &Mirror{}
	f, err := manager.NewFleet(m, mirror, fleet.Options{}, fleet.Secrets{Kube: m.Kube(), Namespace: namespace})
	if err != nil {
		return nil, err
	}
	if mirror.ConfigMaps, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{LabelSelector: "mirror=true"}); err != nil {
		return nil, err
	}
	if mirror.Secrets, err = fleet.Owns[*corev1.Secret](f, fleet.Scope{LabelSelector: "mirrored=true"}); err != nil {
		return nil, err
	}
	return f, nil
}

func main() {
	manager.Main(manager.Options{}, func(m *manager.Manager) error {
		_, err := Setup(m, "clusters")
		return err
	})
}
