package foo

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// Setup adds the Foo controller to m: shared informers of Foos and
// Deployments in namespace ns ("" for all), and a controller that
// reconciles a Foo when it or a Deployment it controls changes. m's
// scheme must include v1alpha1 (see Run).
func Setup(m *manager.Manager, ns string, opts manager.ControllerOptions) (*manager.Controller, error) {
	foos := manager.Informer[*v1alpha1.Foo](m, manager.Scope{Namespace: ns})
	deps := manager.Informer[*appsv1.Deployment](m, manager.Scope{Namespace: ns})
	rec := &Reconciler{Foos: foos.Reader(), Deployments: deps.Reader(), Kube: m.Kube(), FooClient: manager.Client[*v1alpha1.Foo](m),
		Recorder: m.EventRecorder("foo-controller")}
	return manager.NewController(m, "foo", rec, opts, manager.For(foos), manager.Owns(deps))
}

// Run runs the Foo controller in namespace ns ("" for all) against the API
// server of cfg until ctx ends, with /metrics, /healthz and /readyz on
// opts.HTTPAddr. It returns nil after a clean shutdown.
func Run(ctx context.Context, cfg *rest.Config, ns string, opts manager.Options) error {
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	perms, err := Permissions(ns)
	if err != nil {
		return err
	}
	opts.Permissions = append(opts.Permissions, perms...)
	m, err := manager.New(cfg, opts)
	if err != nil {
		return err
	}
	if _, err := Setup(m, ns, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}}); err != nil {
		return err
	}
	return m.Run(ctx)
}

// Permissions are the writes the controller makes, read from the ClusterRole
// generated from the +kubebuilder:rbac markers on the Reconciler
// (config/rbac/role.yaml): the manager checks them at start beside list
// and watch, and the cluster grants the same file.
func Permissions(ns string) ([]manager.Permission, error) {
	return manager.PermissionsFromRBAC(config.Role, ns)
}
