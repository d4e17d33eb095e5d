package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/internal/program"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Options configure a Server.
type Options struct {
	telemetry.Telemetry
	// Addr is where the manager listens for the API server's calls when a
	// webhook is registered. Default: ":9443", as controller-runtime: every
	// interface, since the API server calls from beyond the pod (through
	// a Service); on a laptop or in a test, give a loopback address.
	Addr string
	// Scheme maps each registered type to its group, version and kind.
	// Default: client-go's scheme (Kubernetes' built-in types).
	Scheme *runtime.Scheme
	// CertDir holds the serving certificate and key, PEM encoded, as a
	// Secret of type kubernetes.io/tls mounts them (see CertName and
	// KeyName). They are read again when they change on disk: a rotated
	// certificate is served from the next handshake on, without a
	// restart and without closing open connections. Only what no other
	// user could have changed is read: the directory and those above it
	// must be this user's or root's and writable by no one else unless
	// sticky (a Secret volume is a root-owned tmpfs, mode 1777); every
	// entry on the way to each file this user's or root's, a file not
	// writable by others; a link is followed only inside the directory
	// (a Secret volume's ..data links are); each file must be a regular
	// file of at most 1 MiB.
	CertDir string
	// Certificate, when set, gives the serving certificate at each
	// handshake instead of CertDir: a manager that keeps its certificates
	// in a Secret (manager.Options.WebhookCerts) sets it. It must be safe
	// for concurrent use and fast (a handshake waits on it).
	Certificate func() (*tls.Certificate, error)
	// CertName and KeyName are the file names in CertDir. Default:
	// "tls.crt" and "tls.key".
	CertName, KeyName string
	// Name names the webhook configurations Install writes
	// (NAME-validating, NAME-mutating). Default: the program's name (its
	// file name, lower case, other characters than letters and digits
	// made dashes), so that two operators in one cluster do not replace
	// each other's; "ctrlkit" when that leaves nothing.
	Name string
	// Limits bound the listener's connections and requests (see Limits for
	// each default).
	Limits Limits
}

// Server serves the registered webhooks. Register every handler before
// the server serves its first request.
type Server struct {
	opts     Options
	certs    *certWatcher
	metrics  *metrics
	inflight *inflight

	mux *http.ServeMux

	mu     sync.Mutex
	hooks  []hook // in registration order
	conv   map[schema.GroupKind]*conversion
	counts map[string]*counts // by path
}

// hook is one registered admission path.
type hook struct {
	path     string
	gvk      schema.GroupVersionKind
	mutating bool
	verbs    []string // the operations the API server is asked to send
	config   hookConfig
}

// ErrNoCertDir is the error of a server that has no certificate directory.
var ErrNoCertDir = errors.New("webhook: Options.CertDir is empty: the server needs a certificate and key to serve HTTPS " +
	"(in tests, SelfSigned writes a pair)")

// NewServer returns a server reading its certificate from opts.CertDir.
func NewServer(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = ":9443"
	}
	if opts.Scheme == nil {
		opts.Scheme = scheme.Scheme
	}
	if opts.CertName == "" {
		opts.CertName = "tls.crt"
	}
	if opts.KeyName == "" {
		opts.KeyName = "tls.key"
	}
	if opts.Name == "" {
		opts.Name = program.Name()
	}
	opts.Limits = opts.Limits.withDefaults()
	m, err := newMetrics(opts.Telemetry)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, metrics: m, mux: http.NewServeMux(), conv: map[schema.GroupKind]*conversion{},
		counts:   map[string]*counts{},
		inflight: &inflight{maxCount: opts.Limits.MaxInFlight, maxBytes: opts.Limits.MaxBytesInFlight}}
	s.mux.HandleFunc("/", s.notFound)
	s.mux.Handle(canaryPath, s.limit(answerCanary))
	s.certs = newCertWatcher(opts.CertDir, opts.CertName, opts.KeyName, opts.Log(), m)
	s.certs.src = opts.Certificate
	return s, nil
}

// TLSConfig is the server's TLS configuration: TLS 1.2 at least, with
// Go's default suites for it less the CBC ones (SHA-1 MACs, and padding
// oracles in the past): ECDHE key exchange with AES-GCM or ChaCha20-Poly1305
// only; the certificate from CertDir, read again at a handshake after it
// changed.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: slices.Clone(cipherSuites),
		GetCertificate: s.certs.get, NextProtos: []string{"h2", "http/1.1"}}
}

// cipherSuites are the TLS 1.2 suites the server accepts (TLS 1.3's are
// not configurable, and all are AEAD).
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Options returns the server's options, defaults filled in.
func (s *Server) Options() Options { return s.opts }

// Ready returns nil while the server has a certificate to serve, else why
// not: none has loaded from CertDir (the directory or a file is not
// trusted, or does not parse), or the one served has expired. When a new
// certificate fails to load, the last good one is served and Ready stays
// nil: the replicas of a webhook share the certificate, so failing
// readiness would take every one of them out of its Service at once while
// they still answer; Stats (the debug page), the log and
// ctrlkit_webhook_certificate_errors_total tell why instead.
func (s *Server) Ready() error {
	if s.opts.CertDir == "" && s.opts.Certificate == nil {
		return ErrNoCertDir
	}
	if _, err := s.certs.get(nil); err != nil {
		return err
	}
	return s.certs.expired(time.Now())
}

// ServeHTTP serves a registered path, and 404 naming the registered ones
// for any other.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Serve serves HTTPS on ln, within the Limits (HTTPServer), until ctx
// ends, then shuts down, giving requests in flight up to five seconds. It
// fails at once, closing ln, when the server is not Ready. The manager
// serves its Server itself, with the same HTTPServer; Serve is for a
// Server used alone.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Ready(); err != nil {
		ln.Close()
		return err
	}
	srv := s.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	select {
	case err := <-served:
		return fmt.Errorf("webhook: server stopped: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-served
		return err
	}
}

// Paths returns the registered paths, sorted.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, h := range s.hooks {
		out = append(out, h.path)
	}
	if len(s.conv) > 0 {
		out = append(out, ConvertPath)
	}
	slices.Sort(out)
	return out
}

// register records hk (nil for the conversion path) and serves h at
// path, within the server's limits, refusing a path registered already.
func (s *Server) register(path string, hk *hook, h reviewFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hk != nil {
		for _, o := range s.hooks {
			if o.path == path {
				return fmt.Errorf("webhook: %s is registered twice (one validator and one defaulter per type)", path)
			}
		}
		s.hooks = append(s.hooks, *hk)
	}
	c := &counts{WebhookStats: WebhookStats{Path: path, Type: "conversion"}}
	if hk != nil {
		c.Kind, c.Type = hk.gvk.String(), "validating"
		if hk.mutating {
			c.Type = "mutating"
		}
	}
	s.counts[path] = c
	s.mux.Handle(path, s.instrument(path, c, s.limit(h))) // a ServeMux may gain paths while it serves
	return nil
}

// notFound answers a path nothing is registered at.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("webhook: nothing is registered at %s; registered: %s",
		r.URL.Path, strings.Join(s.Paths(), ", ")))
}

// kindOf returns obj's kind in the scheme.
func (s *Server) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := s.opts.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf("webhook: %T is not in the scheme (Options.Scheme; "+
			"with the manager, Options.AddToScheme): %w", obj, err)
	}
	return gvks[0], nil
}

// admissionPath returns kubebuilder's path for a kind's validating or
// mutating webhook.
func admissionPath(verb string, gvk schema.GroupVersionKind) string {
	return "/" + verb + "-" + strings.ReplaceAll(gvk.Group, ".", "-") + "-" + gvk.Version + "-" + strings.ToLower(gvk.Kind)
}
