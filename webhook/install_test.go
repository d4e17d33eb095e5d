package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v1 "github.com/ctrlkit/ctrlkit/internal/testapi/v1"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// Install returns once the API server calls the webhooks it installed (the
// server picks configurations up from an informer, so a configuration just
// written is not in force yet): a create right after it is reviewed, every
// time. Validators of one kind in two versions get a webhook each, which
// reviews its own version's requests only.
func TestInstall_returnsOnceTheAPIServerCallsTheWebhooksOfBothVersions(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	ns, cfg := srv.Namespace(t), srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: v2.SchemeGroupVersion.Group, Version: "v2", Resource: "gadgets"}).Namespace(ns)
	if err := apiserver.InstallCRDs(t.Context(), cfg, testapi.CRDs); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ca, err := webhook.SelfSigned(certDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	refuse := func(version string) error { return fmt.Errorf("refused by the %s validator", version) }
	for round := range 5 {
		name := fmt.Sprintf("install-%d-%s", round, ns)
		s, err := webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: certDir, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range []error{
			webhook.AddValidator(s, webhook.Validator[*v1.Gadget]{
				Create: func(context.Context, *v1.Gadget) (webhook.Warnings, error) { return nil, refuse("v1") }}),
			webhook.AddValidator(s, webhook.Validator[*v2.Gadget]{
				Create: func(context.Context, *v2.Gadget) (webhook.Warnings, error) { return nil, refuse("v2") }}),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		vwc, _, err := s.Configurations(webhook.ClientConfig{URL: "https://127.0.0.1:1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, w := range vwc.Webhooks {
			names = append(names, w.Name)
			if w.MatchPolicy == nil || *w.MatchPolicy != admissionregistrationv1.Exact {
				t.Errorf("webhook %s: matchPolicy %v, want Exact: each version's validator reviews its own version", w.Name, w.MatchPolicy)
			}
		}
		if want := []string{"validate.v1.gadgets." + v2.SchemeGroupVersion.Group, "validate.v2.gadgets." + v2.SchemeGroupVersion.Group}; !slices.Equal(names, want) {
			t.Fatalf("webhook names %v, want %v", names, want)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx, ln) }()
		cc := webhook.ClientConfig{URL: "https://" + ln.Addr().String(), CABundle: ca, RequireReached: round%2 == 0,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
		err = s.Install(t.Context(), cfg, cc)
		if err == nil {
			// v2 is the stored version: a v1 create would also need the
			// conversion webhook, which this server does not serve.
			_, cerr := gadgets.Create(t.Context(), gadget("v2", fmt.Sprintf("g-%d", round), 1, "nginx"),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(cerr) || !strings.Contains(cerr.Error(), "refused by the v2 validator") {
				t.Errorf("round %d: a create right after Install = %v, want it refused by the webhook", round, cerr)
			}
		}
		if uerr := s.Uninstall(context.Background(), cfg); uerr != nil {
			t.Error(uerr)
		}
		cancel()
		<-served
		if err != nil {
			t.Fatalf("round %d: Install: %v", round, err)
		}
	}
}

// Install with RequireReached returns only once the API server's call
// reached the webhook server: configurations pointing where nothing
// answers are in force (without it Install returns) but never reached
// (with it Install fails, here when its context ends).
func TestInstall_requireReachedFailsWhereTheServerCannotCallTheWebhooks(t *testing.T) {
	srv := env.Get(t)
	cfg := srv.Config()
	ca, err := webhook.SelfSigned(t.TempDir(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a free port: the API server's calls are refused
	for _, reached := range []bool{false, true} {
		name := fmt.Sprintf("unreached-%v-%s", reached, srv.Namespace(t))
		s, err := webhook.NewServer(webhook.Options{Scheme: clientgoscheme.Scheme, CertDir: t.TempDir(), Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if err := webhook.AddValidator(s, webhook.Validator[*corev1.Secret]{
			Create: func(context.Context, *corev1.Secret) (webhook.Warnings, error) { return nil, nil }}); err != nil {
			t.Fatal(err)
		}
		// Long enough for the configuration to be in force on a loaded
		// machine (usually a second): the reached case then fails by its
		// own rule, not for want of time.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		err = s.Install(ctx, cfg, webhook.ClientConfig{URL: "https://" + addr, CABundle: ca, RequireReached: reached,
			FailurePolicy:     admissionregistrationv1.Ignore,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "none"}}})
		cancel()
		if uerr := s.Uninstall(context.Background(), cfg); uerr != nil {
			t.Error(uerr)
		}
		switch {
		case !reached && err != nil:
			t.Errorf("Install of configurations that are in force: %v, want nil", err)
		case reached && (err == nil || !strings.Contains(err.Error(), "did not reach this server")):
			t.Errorf("Install with RequireReached where nothing answers = %v, want an error saying the calls did not reach it", err)
		}
	}
}

// A webhook with an ObjectSelector is sent only the requests for objects
// its selector selects, and an update that removes the label is still
// reviewed (the API server matches the old object too).
func TestObjectSelector_theAPIServerSendsOnlyTheSelectedObjects(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	ns, cfg := srv.Namespace(t), srv.Config()
	kube := apiserver.Client(t, cfg)
	certDir := t.TempDir()
	ca, err := webhook.SelfSigned(certDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: certDir, Name: "selector-" + ns})
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(context.Context, *corev1.ConfigMap) (webhook.Warnings, error) {
		return nil, errors.New("refused by the quota webhook")
	}
	if err := webhook.AddValidator(s, webhook.Validator[*corev1.ConfigMap]{Create: refuse,
		Update: func(ctx context.Context, _, obj *corev1.ConfigMap) (webhook.Warnings, error) { return refuse(ctx, obj) }},
		webhook.ObjectSelector(metav1.LabelSelector{MatchLabels: map[string]string{"quota": "on"}})); err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddValidator(s, webhook.Validator[*corev1.ConfigMap]{Create: refuse},
		webhook.ObjectSelector(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Sometimes"}}})); err == nil {
		t.Error("an invalid selector was taken")
	}
	cms := kube.CoreV1().ConfigMaps(ns)
	existing, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "existing",
		Labels: map[string]string{"quota": "on"}}}, metav1.CreateOptions{}) // before the webhook
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	if err := s.Install(t.Context(), cfg, webhook.ClientConfig{URL: "https://" + ln.Addr().String(), CABundle: ca, RequireReached: true,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Uninstall(context.Background(), cfg); err != nil {
			t.Error(err)
		}
	}()
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "refused by the quota webhook") {
			t.Errorf("%s = %v, want it refused by the webhook", what, err)
		}
	}
	plain, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("an unlabelled ConfigMap was reviewed: %v", err)
	}
	if _, err := cms.Update(t.Context(), plain, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an unlabelled ConfigMap's update was reviewed: %v", err)
	}
	_, err = cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"quota": "on"}}},
		metav1.CreateOptions{})
	refused("a labelled ConfigMap's create", err)
	plain.Labels = map[string]string{"quota": "on"}
	_, err = cms.Update(t.Context(), plain, metav1.UpdateOptions{})
	refused("an update adding the label", err)
	existing.Labels = nil
	_, err = cms.Update(t.Context(), existing, metav1.UpdateOptions{})
	refused("an update removing the label", err)
}
