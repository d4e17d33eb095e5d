package webhookbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// The paths both libraries serve the Pod webhooks at (kubebuilder's, the
// core group empty).
const (
	ValidatePath = "/validate--v1-pod"
	MutatePath   = "/mutate--v1-pod"
)

// DefaultedLabel is the label the defaulter sets.
const DefaultedLabel = "bench.ctrlkit.io/defaulted"

// validatePod is the validator's logic on both sides: one field check.
func validatePod(p *corev1.Pod) error {
	if len(p.Spec.Containers) == 0 {
		return field.Required(field.NewPath("spec", "containers"), "a Pod runs at least one container")
	}
	return nil
}

// defaultPod is the defaulter's logic on both sides: one label.
func defaultPod(p *corev1.Pod) {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[DefaultedLabel] = "true"
}

// crValidator and crDefaulter wrap the same logic in controller-runtime's
// typed interfaces.
type crValidator struct{}

func (crValidator) ValidateCreate(_ context.Context, p *corev1.Pod) (admission.Warnings, error) {
	return nil, validatePod(p)
}

func (crValidator) ValidateUpdate(_ context.Context, _, p *corev1.Pod) (admission.Warnings, error) {
	return nil, validatePod(p)
}

func (crValidator) ValidateDelete(context.Context, *corev1.Pod) (admission.Warnings, error) {
	return nil, nil
}

type crDefaulter struct{}

func (crDefaulter) Default(_ context.Context, p *corev1.Pod) error {
	defaultPod(p)
	return nil
}

// servers are the three servers of a run, each on its own loopback
// port with the same certificate.
type servers struct {
	urls  map[string]string // side -> https://127.0.0.1:port
	roots *x509.CertPool
	done  []chan error
}

// start starts two ctrlkit servers (the second for the A/A row) and one
// controller-runtime server, the certificate written to certDir, and
// returns once each accepts TLS connections. They stop when ctx ends;
// call wait then, whether start failed or not.
func (s *servers) start(ctx context.Context, certDir string) error {
	caPEM, err := webhook.SelfSigned(certDir, "127.0.0.1")
	if err != nil {
		return err
	}
	s.roots = x509.NewCertPool()
	if !s.roots.AppendCertsFromPEM(caPEM) {
		return errors.New("webhookbench: the CA PEM does not parse")
	}
	s.urls = map[string]string{}
	for _, side := range []string{Ctrlkit, AA} {
		url, done, err := startCtrlkit(ctx, certDir)
		if err != nil {
			return err
		}
		s.urls[side], s.done = url, append(s.done, done)
	}
	url, done, err := startControllerRuntime(ctx, certDir)
	if err != nil {
		return err
	}
	s.urls[ControllerRuntime], s.done = url, append(s.done, done)
	for side, url := range s.urls {
		if err := waitTLS(ctx, url, s.roots); err != nil {
			return fmt.Errorf("webhookbench: the %s server does not answer: %w", side, err)
		}
	}
	return nil
}

// wait waits for every started server to return after ctx ended.
func (s *servers) wait() error {
	var errs []error
	for _, d := range s.done {
		if err := <-d; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func startCtrlkit(ctx context.Context, certDir string) (string, chan error, error) {
	s, err := webhook.NewServer(webhook.Options{CertDir: certDir, Scheme: scheme.Scheme,
		Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}}) // metrics on, as in a manager
	if err != nil {
		return "", nil, err
	}
	if err := webhook.AddValidator(s, webhook.Validator[*corev1.Pod]{
		Create: func(_ context.Context, p *corev1.Pod) (webhook.Warnings, error) { return nil, validatePod(p) },
		Update: func(_ context.Context, _, p *corev1.Pod) (webhook.Warnings, error) { return nil, validatePod(p) },
	}); err != nil {
		return "", nil, err
	}
	if err := webhook.AddDefaulter(s, func(_ context.Context, p *corev1.Pod) error { defaultPod(p); return nil }); err != nil {
		return "", nil, err
	}
	if got := s.Paths(); len(got) != 2 || got[0] != MutatePath || got[1] != ValidatePath {
		return "", nil, fmt.Errorf("webhookbench: ctrlkit serves %v, want %s and %s", got, MutatePath, ValidatePath)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return "https://" + ln.Addr().String(), done, nil
}

func startControllerRuntime(ctx context.Context, certDir string) (string, chan error, error) {
	crlog.SetLogger(logr.Discard()) // its log lines would mix with the table
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	s := crwebhook.NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	s.Register(ValidatePath, admission.WithValidator[*corev1.Pod](scheme.Scheme, crValidator{}))
	s.Register(MutatePath, admission.WithDefaulter[*corev1.Pod](scheme.Scheme, crDefaulter{}))
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	return "https://127.0.0.1:" + strconv.Itoa(port), done, nil
}

// freePort returns a loopback port free a moment ago: controller-runtime's
// server listens on a port it is given, not on a listener.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitTLS returns once url's server completes a TLS handshake that
// verifies against roots, polling while it starts (up to 10 s).
func waitTLS(ctx context.Context, url string, roots *x509.CertPool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr := url[len("https://"):]
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		d := tls.Dialer{Config: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// newClient is the API server's webhook client for one server: one
// transport, keep-alive, the CA bundle as the configuration's caBundle.
// HTTP/1.1 is what the API server speaks to a webhook behind a Service
// (and to any URL not on loopback); HTTP/2 only to a loopback URL.
func newClient(roots *x509.CertPool, proto string) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 25, // client-go's transport default
		IdleConnTimeout:     90 * time.Second,
	}
	if proto == HTTP2 {
		tr.ForceAttemptHTTP2 = true
		tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}
	} else {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
