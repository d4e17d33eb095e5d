// Package podcensus is a cluster-wide Pod controller that caches a
// projection of each Pod instead of the whole object: it keeps, per node, a
// ConfigMap counting the node's Pods by phase. It reads a Pod's name, node
// and phase, so its cache holds those (and the metadata) and nothing of
// the containers, volumes, env or status details that make up most of a
// Pod's bytes; the projection is decoded straight from the API server's
// protobuf, the whole Pod is never built.
package podcensus

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

//go:generate go tool controller-gen object paths=./...

// PodView is the part of a Pod the census reads: its metadata, the node it
// runs on and its phase. Fields are named as in corev1.Pod.
//
// +kubebuilder:object:root=true
type PodView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              PodViewSpec   `json:"spec"`
	Status            PodViewStatus `json:"status"`
}

// PodViewSpec is the node a Pod was scheduled to.
type PodViewSpec struct {
	NodeName string `json:"nodeName"`
}

// PodViewStatus is a Pod's phase.
type PodViewStatus struct {
	Phase corev1.PodPhase `json:"phase"`
}

// NodeView is a Node's metadata alone: the census is kept per Node.
//
// +kubebuilder:object:root=true
type NodeView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
}

// byNode indexes Pods by the node they run on.
const byNode = "node"

// Census writes one ConfigMap per node, in Namespace, counting its Pods by
// phase.
type Census struct {
	Pods      store.Reader[*PodView]
	Kube      kubernetes.Interface
	Namespace string
}

// Setup adds the census controller to m: it reconciles every Node, and
// the Node of each Pod that changes. Both informers cache projections.
func Setup(m *manager.Manager, namespace string) error {
	pods := manager.Projection[*PodView, corev1.Pod](m, manager.Scope{})
	if err := pods.AddIndexers(store.Indexers[*PodView]{byNode: func(p *PodView) ([]string, error) {
		return []string{p.Spec.NodeName}, nil
	}}); err != nil {
		return err
	}
	onNode := func(p *PodView) []object.ObjectName {
		if p.Spec.NodeName == "" {
			return nil // not scheduled yet
		}
		return []object.ObjectName{{Name: p.Spec.NodeName}}
	}
	_, err := manager.NewController(m, "podcensus", &Census{Pods: pods.Reader(), Kube: m.Kube(), Namespace: namespace},
		manager.ControllerOptions{}, manager.For(manager.Projection[*NodeView, corev1.Node](m, manager.Scope{})),
		manager.Watches(pods, onNode))
	return err
}

// Reconcile counts the Pods of node name.Name and applies its ConfigMap.
func (c *Census) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	pods, err := c.Pods.ByIndex(byNode, name.Name)
	if err != nil {
		return controller.Result{}, err
	}
	counts := map[string]string{"total": strconv.Itoa(len(pods))}
	for _, phase := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed} {
		n := 0
		for _, p := range pods {
			if p.Status.Phase == phase {
				n++
			}
		}
		counts[string(phase)] = strconv.Itoa(n)
	}
	cm := corev1ac.ConfigMap("node-"+name.Name, c.Namespace).WithData(counts)
	_, err = c.Kube.CoreV1().ConfigMaps(c.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "podcensus", Force: true})
	return controller.Result{}, err
}
