package foo

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// Setup adds the Foo controller to m: shared informers of Foos and
// Deployments in namespace ns ("" for all), and a controller that
// reconciles a Foo when it or a Deployment it controls changes. m's
// scheme must include v1alpha1 (see Run).
func Setup(m *manager.Manager, ns string, opts manager.ControllerOptions) (*manager.Controller, error) {
	fc, err := v1alpha1.NewForConfig(m.Config())
	if err != nil {
		return nil, err
	}
	foos := manager.Informer[*v1alpha1.Foo](m, manager.Scope{Namespace: ns})
	deps := manager.Informer[*appsv1.Deployment](m, manager.Scope{Namespace: ns})
	rec := &Reconciler{Foos: foos.Reader(), Deployments: deps.Reader(), Kube: m.Kube(), FooClient: fc,
		Recorder: m.EventRecorder("foo-controller")}
	return manager.NewController(m, "foo", rec, opts, manager.For(foos), manager.Owns(deps))
}

// Run runs the Foo controller in namespace ns ("" for all) against the API
// server of cfg until ctx ends, with /metrics, /healthz and /readyz on
// opts.HTTPAddr. It returns nil after a clean shutdown.
func Run(ctx context.Context, cfg *rest.Config, ns string, opts manager.Options) error {
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	opts.Permissions = append(opts.Permissions, Permissions(ns)...)
	m, err := manager.New(cfg, opts)
	if err != nil {
		return err
	}
	if _, err := Setup(m, ns, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}}); err != nil {
		return err
	}
	return m.Run(ctx)
}

// Permissions are the writes the controller makes (config/rbac.yaml grants
// them); the manager checks them at start beside list and watch.
func Permissions(ns string) []manager.Permission {
	return []manager.Permission{
		{Verb: "update", Group: v1alpha1.GroupName, Resource: "foos", Subresource: "status", Namespace: ns},
		{Verb: "create", Group: "apps", Resource: "deployments", Namespace: ns},
		{Verb: "update", Group: "apps", Resource: "deployments", Namespace: ns},
		{Verb: "create", Resource: "events", Namespace: ns},
	}
}
