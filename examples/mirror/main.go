// Command mirror keeps a Secret beside every ConfigMap labelled mirror=true,
// with the same data, owned by the ConfigMap so it is deleted with it. It is
// the comparison program of docs/compare/README.md: a
// manager, For + Owns, metrics and probes on :8080.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// fieldManager names the mirror's writes; its informers keep this
// manager's entry of managedFields so apply.Apply can tell a write that
// would change nothing.
const fieldManager = "mirror"

// Reconciler writes the Secret of one ConfigMap with server-side apply,
// unless the cached Secret already holds it.
type Reconciler struct {
	ConfigMaps store.Reader[*corev1.ConfigMap]
	Secrets    store.Reader[*corev1.Secret]
	Kube       kubernetes.Interface
}

func (r *Reconciler) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	cm, ok := r.ConfigMaps.Get(name)
	if !ok {
		return controller.Result{}, nil // deleted: the garbage collector deletes its Secret
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	secret := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirrored": "true"}).WithData(data).
		WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	_, _, err := apply.Apply(ctx, r.Kube.CoreV1().Secrets(cm.Namespace), r.Secrets, secret,
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true}) // no request when the cached Secret holds it
	return controller.Result{}, err
}

// run runs the mirror controller against cfg until ctx ends.
func run(ctx context.Context, cfg *rest.Config, opts manager.Options) error {
	m, err := newManager(cfg, opts)
	if err != nil {
		return err
	}
	return m.Run(ctx)
}

// newManager returns a manager with the mirror controller, not started.
func newManager(cfg *rest.Config, opts manager.Options) (*manager.Manager, error) {
	opts.Informers.KeepManagedFieldsOf = append(opts.Informers.KeepManagedFieldsOf, fieldManager)
	m, err := manager.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{LabelSelector: "mirror=true"})
	// Only Secrets labelled mirrored=true are in this informer, so the
	// Secret Reconcile writes must carry that label: without it, a change
	// to the Secret fires no Owns event, and apply.Apply never finds it in
	// this cache (it then sends every apply, with no UID precondition).
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{LabelSelector: "mirrored=true"})
	rec := &Reconciler{ConfigMaps: cms.Reader(), Secrets: secrets.Reader(), Kube: m.Kube()}
	if _, err := manager.NewController(m, "mirror", rec, manager.ControllerOptions{},
		manager.For(cms), manager.Owns(secrets)); err != nil {
		return nil, err
	}
	return m, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := manager.LoadConfig("") // as kubectl: $KUBECONFIG, ~/.kube/config, or in a cluster its service account
	if err == nil {
		err = run(ctx, cfg, manager.Options{HTTPAddr: ":8080", DisableDebug: true})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mirror:", err)
		os.Exit(1)
	}
}
