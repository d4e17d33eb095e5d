package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v1 "github.com/ctrlkit/ctrlkit/internal/testapi/v1"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/webhook"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// validateGadget is the tests' validator: an image is required and at most
// ten replicas; more than five gets a warning.
func validateGadget(_ context.Context, g *v2.Gadget) (webhook.Warnings, error) {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if g.Spec.Container.Image == "" {
		errs = append(errs, field.Required(spec.Child("container", "image"), "a gadget runs an image"))
	}
	if g.Spec.Replicas > 10 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), g.Spec.Replicas, "at most 10"))
	}
	var warnings webhook.Warnings
	if g.Spec.Replicas > 5 {
		warnings = append(warnings, "more than 5 replicas is a lot")
	}
	return warnings, errs.ToAggregate()
}

// defaultGadget gives a gadget without replicas one.
func defaultGadget(_ context.Context, g *v2.Gadget) error {
	if g.Spec.Replicas == 0 {
		g.Spec.Replicas = 1
	}
	return nil
}

// fixture is a webhook server serving Gadgets' validator, defaulter and
// conversion on loopback, installed in the real API server for one
// namespace.
type fixture struct {
	cfg     *rest.Config
	hc      *http.Client
	reg     *prometheus.Registry
	ns      string
	certDir string
	addr    string
	server  *webhook.Server
	ca      []byte
	stop    context.CancelFunc
	served  chan error
	gadgets func(version string) dynamic.ResourceInterface
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := env.Get(t)
	f := &fixture{cfg: srv.Config(), ns: srv.Namespace(t), certDir: t.TempDir()}
	hc, err := rest.HTTPClientFor(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.hc, f.reg = hc, prometheus.NewRegistry()
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	if err := apiserver.InstallCRDs(t.Context(), f.cfg, testapi.CRDs); err != nil {
		t.Fatal(err)
	}
	if f.ca, err = webhook.SelfSigned(f.certDir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f.server, err = webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: f.certDir, Name: "test-" + f.ns,
		Telemetry: telemetry.Telemetry{Registerer: f.reg}})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		webhook.AddValidator(f.server, webhook.Validator[*v2.Gadget]{Create: validateGadget,
			Update: func(ctx context.Context, _, g *v2.Gadget) (webhook.Warnings, error) { return validateGadget(ctx, g) }}),
		webhook.AddDefaulter(f.server, defaultGadget),
		webhook.AddConversion[*v2.Gadget](f.server, &v1.Gadget{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.served = cancel, make(chan error, 1)
	go func() { f.served <- f.server.Serve(ctx, ln) }()
	t.Cleanup(f.stopServer)
	f.install(t, f.ca, admissionregistrationv1.Fail)
	t.Cleanup(func() {
		if err := f.server.Uninstall(context.Background(), f.cfg); err != nil {
			t.Error(err)
		}
	})
	dyn, err := dynamic.NewForConfigAndClient(f.cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	f.gadgets = func(version string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: v2.SchemeGroupVersion.Group, Version: version,
			Resource: "gadgets"}).Namespace(f.ns)
	}
	// Run first (cleanups run last in, first out): the gadgets go while this
	// server still converts them. Left behind, every later LIST of gadgets
	// (InstallCRDs' check, another test's) would need the conversion webhook
	// of a server that is gone: the embedded API server runs no namespace
	// controller to delete them with the namespace.
	t.Cleanup(func() {
		if err := f.gadgets("v2").DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting the test's gadgets: %v", err)
		}
	})
	return f
}

// stopServer stops the webhook server and waits for it.
func (f *fixture) stopServer() {
	if f.stop != nil {
		f.stop()
		<-f.served
		f.stop = nil
	}
}

// install writes the configurations for the fixture's namespace, with ca
// as the CA bundle.
func (f *fixture) install(t *testing.T, ca []byte, policy admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	cc := webhook.ClientConfig{URL: "https://" + f.addr, CABundle: ca, FailurePolicy: policy,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": f.ns}}}
	if err := f.server.Install(t.Context(), f.cfg, cc); err != nil {
		t.Fatal(err)
	}
}

// gadget returns a Gadget in version v1 or v2 as unstructured.
func gadget(version, name string, replicas int64, image string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v2.SchemeGroupVersion.Group + "/" + version, "kind": "Gadget",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{}}}
	if replicas != 0 {
		_ = unstructured.SetNestedField(u.Object, replicas, "spec", "replicas")
	}
	if version == "v1" {
		_ = unstructured.SetNestedField(u.Object, image, "spec", "image")
	} else if image != "" {
		_ = unstructured.SetNestedField(u.Object, image, "spec", "container", "image")
	}
	return u
}

func TestWebhooks_onTheRealAPIServer(t *testing.T) {
	env.Get(t) // started before the check: it outlives the test
	leakcheck.Check(t)
	f := newFixture(t)
	ctx := t.Context()

	t.Run("an invalid object is rejected with the handler's message and field path", func(t *testing.T) {
		_, err := f.gadgets("v2").Create(ctx, gadget("v2", "bad", 20, ""), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create: %v, want Invalid", err)
		}
		var causes []string
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Details != nil {
			for _, c := range st.Status().Details.Causes {
				causes = append(causes, c.Field)
			}
		}
		if strings.Join(causes, ",") != "spec.container.image,spec.replicas" {
			t.Errorf("causes name fields %q, want spec.container.image,spec.replicas (status %v)", causes, err)
		}
		if !strings.Contains(err.Error(), "a gadget runs an image") || !strings.Contains(err.Error(), "at most 10") {
			t.Errorf("message %q lacks the handler's messages", err)
		}
	})

	t.Run("a defaulted field is stored, a warning reaches the client", func(t *testing.T) {
		var warnings []string
		cfg := rest.CopyConfig(f.cfg)
		cfg.WarningHandlerWithContext = warningFunc(func(msg string) { warnings = append(warnings, msg) })
		dyn, err := dynamic.NewForConfigAndClient(cfg, f.hc)
		if err != nil {
			t.Fatal(err)
		}
		r := dyn.Resource(schema.GroupVersionResource{Group: v2.SchemeGroupVersion.Group, Version: "v2", Resource: "gadgets"}).Namespace(f.ns)
		if _, err := r.Create(ctx, gadget("v2", "defaulted", 0, "nginx"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := f.gadgets("v2").Get(ctx, "defaulted", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); n != 1 {
			t.Errorf("stored replicas %d, want the default 1", n)
		}
		if _, err := r.Create(ctx, gadget("v2", "many", 7, "nginx"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(warnings, "|") != "more than 5 replicas is a lot" {
			t.Errorf("warnings %q, want the validator's", warnings)
		}
	})

	t.Run("the metrics count requests and rejections by webhook", func(t *testing.T) {
		validate := "/validate-gadgets-webhook-ctrlkit-test-v2-gadget"
		if n := value(t, f.reg, "ctrlkit_webhook_rejections_total", map[string]string{"webhook": validate}); n != 1 {
			t.Errorf("rejections of %s: %v, want 1", validate, n)
		}
		if n := value(t, f.reg, "controller_runtime_webhook_requests_total", map[string]string{"webhook": validate, "code": "200"}); n < 3 {
			t.Errorf("requests of %s answered 200: %v, want at least 3", validate, n)
		}
	})

	t.Run("a v1 object read as v2 and back round-trips", func(t *testing.T) {
		if _, err := f.gadgets("v1").Create(ctx, gadget("v1", "old", 3, "busybox"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		asV2, err := f.gadgets("v2").Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img, _, _ := unstructured.NestedString(asV2.Object, "spec", "container", "image"); img != "busybox" {
			t.Errorf("read as v2: image %q, want busybox (%v)", img, asV2.Object["spec"])
		}
		asV1, err := f.gadgets("v1").Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		img, _, _ := unstructured.NestedString(asV1.Object, "spec", "image")
		n, _, _ := unstructured.NestedInt64(asV1.Object, "spec", "replicas")
		if img != "busybox" || n != 3 {
			t.Errorf("read back as v1: image %q replicas %d, want busybox 3", img, n)
		}
		// An update through v1 is validated as the hub: the conversion runs first.
		asV1.Object["spec"] = map[string]any{"replicas": int64(3), "image": ""}
		if _, err := f.gadgets("v1").Update(ctx, asV1, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("update through v1 without an image: %v, want Invalid", err)
		}
	})

	t.Run("a certificate rotated on disk is served without a restart", func(t *testing.T) {
		client, reused := f.tlsClient(t, f.ca)
		f.post(t, client) // a connection opened before the rotation
		newDir := t.TempDir()
		ca2, err := webhook.SelfSigned(newDir, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		f.install(t, append(append([]byte{}, f.ca...), ca2...), admissionregistrationv1.Fail) // trust both during the rotation
		for _, name := range []string{"tls.key", "tls.crt"} {
			if err := os.Rename(filepath.Join(newDir, name), filepath.Join(f.certDir, name)); err != nil {
				t.Fatal(err)
			}
		}
		f.post(t, client)
		if !*reused {
			t.Error("the connection opened before the rotation was not reused after it")
		}
		fresh, _ := f.tlsClient(t, ca2) // trusts only the new CA
		f.post(t, fresh)
		if _, err := f.gadgets("v2").Create(ctx, gadget("v2", "after-rotation", 0, "nginx"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server's call after the rotation: %v", err)
		}
	})

	t.Run("the webhook process down gives the failure policy's behaviour", func(t *testing.T) {
		f.stopServer()
		_, err := f.gadgets("v2").Create(ctx, gadget("v2", "while-down", 0, "nginx"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("create with failurePolicy Fail while the webhook is down: %v, want a failed call", err)
		}
		f.install(t, f.ca, admissionregistrationv1.Ignore)
		if _, err := f.gadgets("v2").Create(ctx, gadget("v2", "while-down", 0, "nginx"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create with failurePolicy Ignore while the webhook is down: %v", err)
		}
		got, err := f.gadgets("v2").Get(ctx, "while-down", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, found, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); found {
			t.Errorf("replicas %d stored while the defaulter was down", n)
		}
	})
}

// tlsClient returns an HTTPS client trusting ca, and a flag set when its
// last request reused a connection.
func (f *fixture) tlsClient(t *testing.T, ca []byte) (*http.Client, *bool) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("bad CA PEM")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	reused := new(bool)
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { *reused = i.Reused }}
		return tr.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	})}, reused
}

// post sends a malformed review: any answer shows the TLS handshake and
// the server work.
func (f *fixture) post(t *testing.T, c *http.Client) {
	t.Helper()
	resp, err := c.Post("https://"+f.addr+"/convert", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // drained, the connection is kept for the next request
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

// value returns the value of the counter name whose labels are labels.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
			seen = append(seen, fmt.Sprint(got))
		}
	}
	t.Fatalf("no series %s%v; seen %v", name, labels, seen)
	return 0
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type warningFunc func(string)

func (f warningFunc) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	f(msg)
}
