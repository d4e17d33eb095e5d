package main

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// demoWebhooks is the Foo webhooks of the demo: a certificate made for
// 127.0.0.1 by a CA of its own, in a temporary directory.
type demoWebhooks struct {
	dir string
	ca  []byte
}

// newDemoWebhooks makes the certificate and returns the webhook options
// of the demo's manager.
func newDemoWebhooks() (*demoWebhooks, webhook.Options, error) {
	dir, err := os.MkdirTemp("", "ctrlkit-demo-webhook-")
	if err != nil {
		return nil, webhook.Options{}, err
	}
	ca, err := webhook.SelfSigned(dir, "127.0.0.1")
	if err != nil {
		os.RemoveAll(dir)
		return nil, webhook.Options{}, err
	}
	return &demoWebhooks{dir: dir, ca: ca}, webhook.Options{Addr: "127.0.0.1:0", CertDir: dir, Name: "foo"}, nil
}

func (w *demoWebhooks) close() { os.RemoveAll(w.dir) }

// register registers Foo's webhooks with m (before Run).
func (w *demoWebhooks) register(m *manager.Manager) error { return foo.Webhooks(m) }

// show points the API server at the running manager's webhooks, then
// sends it a Foo the validator rejects and one the defaulter completes
// (dry runs: admission runs, nothing is stored).
func (d *demo) showWebhooks(ctx context.Context, cfg *rest.Config, m *manager.Manager, w *demoWebhooks) error {
	cc := webhook.ClientConfig{URL: "https://" + m.WebhookAddr(ctx), CABundle: w.ca}
	if err := m.Webhooks().Install(ctx, cfg, cc); err != nil {
		return err
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	bad := &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "reserved", Namespace: demoNamespace},
		Spec: v1alpha1.FooSpec{DeploymentName: "kube-proxy"}}
	_, err := d.fooAPI.Create(ctx, bad, dry)
	if err == nil {
		return fmt.Errorf("demo: the validating webhook let a Foo with deploymentName kube-proxy through")
	}
	fmt.Fprintf(d.out, "webhooks on %s: a Foo for Deployment kube-proxy is rejected:\n  %v\n", m.WebhookAddr(ctx), err)
	plain := &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "defaulted", Namespace: demoNamespace},
		Spec: v1alpha1.FooSpec{DeploymentName: "defaulted-web"}}
	got, err := d.fooAPI.Create(ctx, plain, dry)
	if err != nil {
		return fmt.Errorf("demo: a Foo without replicas: %w", err)
	}
	if got.Spec.Replicas == nil {
		return fmt.Errorf("demo: the mutating webhook did not default spec.replicas")
	}
	fmt.Fprintf(d.out, "  a Foo without replicas is stored with spec.replicas: %d, set by the defaulting webhook (dry run)\n",
		*got.Spec.Replicas)
	return nil
}
