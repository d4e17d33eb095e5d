package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"

	webv1 "example.com/website/api/v1"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestWebsite_servesTheSiteThenLeavesTheDirectory(t *testing.T) {
	srv := env.Get(t)
	ctx := t.Context()
	if err := apiserver.InstallCRDs(ctx, srv.Config(), CRDs); err != nil {
		t.Fatal(err)
	}
	ns, directory := srv.Namespace(t), srv.Namespace(t)
	m, err := manager.New(srv.Config(), manager.Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler),
		AddToScheme: []func(*runtime.Scheme) error{webv1.AddToScheme},
		Informers:   informer.FactoryOptions{KeepManagedFieldsOf: []string{applyOptions.FieldManager}}}) // as main
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(m, directory); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	kube, websites := apiserver.Client(t, srv.Config()), manager.Client[*webv1.Website](m)

	site := &webv1.Website{ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: ns},
		Spec: webv1.WebsiteSpec{Host: "blog.example.com", Image: "nginx:1.27"}}
	if _, err := websites.Create(ctx, site, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var deployment *appsv1.Deployment
	waitFor(t, "the Deployment, the Service and the directory entry", func(ctx context.Context) (err error) {
		if deployment, err = kube.AppsV1().Deployments(ns).Get(ctx, "blog", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err = kube.CoreV1().Services(ns).Get(ctx, "blog", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err = kube.CoreV1().ConfigMaps(directory).Get(ctx, ns+".blog", metav1.GetOptions{})
		return err
	})

	// No kubelet runs here: report the replica available, as the cluster would.
	deployment.Status = appsv1.DeploymentStatus{ObservedGeneration: deployment.Generation, Replicas: 1,
		ReadyReplicas: 1, AvailableReplicas: 1}
	if _, err := kube.AppsV1().Deployments(ns).UpdateStatus(ctx, deployment, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Website to be Ready", func(ctx context.Context) error {
		got, err := websites.Get(ctx, object.NameOf(site))
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})

	if err := websites.Delete(ctx, object.NameOf(site), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Website and its directory entry to go", func(ctx context.Context) error {
		if _, err := kube.CoreV1().ConfigMaps(directory).Get(ctx, ns+".blog", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errors.New("the directory entry is still there")
		}
		if _, err := websites.Get(ctx, object.NameOf(site)); !apierrors.IsNotFound(err) {
			return errors.New("the Website is still there")
		}
		return nil
	})
}

func TestWebsite_webhooksDefaultTheImageAndGuardTheHost(t *testing.T) {
	srv := env.Get(t)
	ctx := t.Context()
	if err := apiserver.InstallCRDs(ctx, srv.Config(), CRDs); err != nil {
		t.Fatal(err)
	}
	ns, certs := srv.Namespace(t), t.TempDir()
	ca, err := webhook.SelfSigned(certs, "127.0.0.1") // in a cluster, a certificate manager's Secret
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(srv.Config(), manager.Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler),
		AddToScheme: []func(*runtime.Scheme) error{webv1.AddToScheme},
		// Name names the webhook configurations (default: the program's name): one per test, so tests
		// running at once on one API server do not replace each other's.
		Webhook: webhook.Options{Addr: "127.0.0.1:0", CertDir: certs, Name: ns}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Webhooks(m); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	webhooks := url.URL{Scheme: "https", Host: m.WebhookAddr(ctx)} // where the API server calls them
	hooks := webhook.ClientConfig{URL: webhooks.String(), CABundle: ca,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	if err := m.Webhooks().Install(ctx, srv.Config(), hooks); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Webhooks().Uninstall(context.Background(), srv.Config()) })
	websites := manager.Client[*webv1.Website](m)

	site, err := websites.Create(ctx, &webv1.Website{ObjectMeta: metav1.ObjectMeta{Name: "docs", Namespace: ns},
		Spec: webv1.WebsiteSpec{Host: "docs.example.com"}}, metav1.CreateOptions{})
	if err != nil || site.Spec.Image != defaultImage {
		t.Fatalf("created %v, %v; want the default image", site, err)
	}
	site.Spec.Host = "www.example.com"
	if _, err := websites.Update(ctx, site, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "spec.host: Forbidden: the host of a Website cannot change") {
		t.Errorf("changing the host: %v, want Invalid naming spec.host", err)
	}
	bad := &webv1.Website{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}, Spec: webv1.WebsiteSpec{Host: "Not A Host"}}
	if _, err := websites.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `spec.host: Invalid value: "Not A Host"`) {
		t.Errorf("a host that is no DNS name: %v, want Invalid naming spec.host", err)
	}
}

// start runs m until the test ends.
func start(t *testing.T, m *manager.Manager) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// waitFor polls cond until it returns nil, for up to 30 seconds.
func waitFor(t *testing.T, what string, cond func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) { last = cond(ctx); return last == nil, nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}
