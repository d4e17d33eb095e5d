// Command hello is the controller that docs/guide.md builds: it greets every
// ConfigMap labelled hello=true by writing "Hello, NAME!" under the key
// greeting, NAME being the ConfigMap's own key name.
package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// Greeter writes the greeting of one ConfigMap at a time.
type Greeter struct {
	ConfigMaps store.Reader[*corev1.ConfigMap] // the informer's cache: shared, read-only
	Kube       kubernetes.Interface            // for writes
}

// Reconcile makes the ConfigMap called name carry its greeting. It runs
// whenever that ConfigMap changes, and again after an error, so it looks at
// the current state and does only what is missing.
func (g *Greeter) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	cm, ok := g.ConfigMaps.Get(name)
	if !ok {
		return controller.Result{}, nil // deleted since it was queued: nothing to do
	}
	want := "Hello, " + cm.Data["name"] + "!"
	if cm.Data["greeting"] == want {
		return controller.Result{}, nil // done already
	}
	cm = cm.DeepCopy() // objects in the cache are shared: copy before changing
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["greeting"] = want
	_, err := g.Kube.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return controller.Result{}, err // an error (a conflict too) retries with backoff
}

// Setup adds the greeter to m: an informer on the ConfigMaps labelled
// hello=true in namespace ("" for all), and a controller whose queue gets the
// name of each one that is added or changes.
func Setup(m *manager.Manager, namespace string) error {
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: namespace, LabelSelector: "hello=true"})
	g := &Greeter{ConfigMaps: cms.Reader(), Kube: m.Kube()}
	_, err := manager.NewController(m, "greeter", g, manager.ControllerOptions{}, manager.For(cms))
	return err
}
