package foo

import (
	"context"
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// Webhooks registers Foo's admission webhooks with m: a Foo without
// replicas gets one (the defaulter), and a Foo may not name a Deployment
// with the "kube-" prefix, which cluster components use (the validator).
// The manager serves them on Options.Webhook's HTTPS listener.
func Webhooks(m *manager.Manager) error {
	return errors.Join(
		webhook.AddDefaulter(m.Webhooks(), defaultFoo),
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*v1alpha1.Foo]{
			Create: func(_ context.Context, f *v1alpha1.Foo) (webhook.Warnings, error) { return validateFoo(f) },
			Update: func(_ context.Context, _, f *v1alpha1.Foo) (webhook.Warnings, error) { return validateFoo(f) },
		}))
}

func defaultFoo(_ context.Context, f *v1alpha1.Foo) error {
	if f.Spec.Replicas == nil {
		one := int32(1)
		f.Spec.Replicas = &one
	}
	return nil
}

func validateFoo(f *v1alpha1.Foo) (webhook.Warnings, error) {
	if strings.HasPrefix(f.Spec.DeploymentName, "kube-") {
		return nil, field.Invalid(field.NewPath("spec", "deploymentName"), f.Spec.DeploymentName,
			`the prefix "kube-" is reserved for cluster components`)
	}
	return nil, nil
}
