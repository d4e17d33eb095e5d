package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/tracing"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// Errors of New and Run; classify them with errors.Is.
var (
	// ErrStarted reports a second call to Run, or a Runnable added after
	// Run started (controllers may be: see NewController).
	// It is the same value as the other packages' ErrStarted.
	ErrStarted = run.ErrStarted
	// ErrUnreachable reports an API server that did not answer at start.
	ErrUnreachable = errors.New("manager: cannot reach the API server")
	// ErrKindNotServed reports, with Options.RequireServedKinds, a kind the
	// API server does not serve (a CustomResourceDefinition not installed).
	ErrKindNotServed = errors.New("manager: kind not served")
	// ErrLeaseUnusable reports, at start, leader election that cannot work:
	// the Lease's namespace is missing or RBAC forbids using Leases.
	ErrLeaseUnusable = errors.New("manager: leader election cannot work")
	// ErrDuplicateName reports a second controller with the same name.
	ErrDuplicateName = errors.New("manager: duplicate controller name")
)

// Runnable is anything the manager runs beside its controllers: Run blocks
// until ctx ends and returns only after every goroutine it started has
// exited. An error stops the manager.
type Runnable interface {
	Run(ctx context.Context) error
}

// LeaderElectionRunnable is a Runnable that says whether it needs the
// lease. With Options.LeaderElection, a Runnable runs only while this
// replica leads unless it is a LeaderElectionRunnable whose
// NeedLeaderElection returns false (e.g. a metrics exporter, or a cache
// warmer every replica needs).
type LeaderElectionRunnable interface {
	Runnable
	NeedLeaderElection() bool
}

// RunnableFunc adapts a function to Runnable.
type RunnableFunc func(ctx context.Context) error

// Run calls f.
func (f RunnableFunc) Run(ctx context.Context) error { return f(ctx) }

// Manager runs controllers in one process over shared informers, with one
// Prometheus registry, one logger and one HTTP listener (/metrics, /healthz,
// /readyz, /debug/ctrlkit). Build it with New, get informers with Informer
// and clients with Client, add controllers with NewController, then Run it. Its methods are safe for
// concurrent use.
type Manager struct {
	cfg       *rest.Config
	http      *http.Client // shared by every client of the manager
	opts      Options
	scheme    *runtime.Scheme
	kube      *kubernetes.Clientset
	discovery listwatch.Discovery // how informers reach a kind
	factory   *informer.Factory
	keep      *intern.FieldManagers // KeepManagedFieldsOf's, read by every informer
	recorder  *recorders
	elector   *election.Elector // nil without leader election
	sharder   *shard.Sharder    // nil without sharding
	received  *received         // bytes per informer, shard fallbacks
	ledger    *ledger.Ledger    // the writes made for keys, for ReadYourWrites
	tracer    trace.Tracer      // from Options.TracerProvider; nil without
	writes    *tracing.Writes   // traced writes, for the links of the events they cause
	webhooks  *webhook.Server   // served once a webhook is registered
	api       *apiProbe         // tells /readyz whether the API server answers

	// The controllers' starters: the ones every replica runs, the ones
	// this replica runs while it leads.
	everyStarter, leaderStarter *starter

	// mu guards the fields below. Invariant: once running, runnables do
	// not change; controllers come and go (NewController,
	// RemoveController).
	mu          sync.Mutex
	stopping    bool // Run's context ended, or Run returned
	controllers []controllerEntry
	runnables   []Runnable
	checks      []check
	informers   []informerEntry
	refs        map[string]int // by informer or set name: Informer, Projection and InNamespaces calls and controllers' sources not released
	sets        map[string]namespaceSet
	served      []*servedWatch // WhenServed's
	errs        []error        // from Informer, returned by Run
	once        run.Once       // Run
	listening   chan struct{}  // closed when Run has bound its listener or failed
	addr        string
	webhookAddr string
	metricsAddr string

	fleets []*fleet.Fleet // NewFleet's, for the debug page; guarded by mu
	// providerPermissions are what NewFleet's providers read (see
	// providerPermissions); guarded by mu.
	providerPermissions []Permission
	clients             map[reflect.Type]any                     // T → *client.Client[T], made by Client; guarded by mu
	finalized           []schema.GroupVersionKind                // the kinds a Finalizer patches; guarded by mu
	projections         map[reflect.Type]schema.GroupVersionKind // projection type → its full type's kind; guarded by mu
}

// New returns a manager for the API server of cfg; it starts nothing and
// makes no request. It fails on an invalid cfg or AddToScheme error. A cfg
// that sets no client-side rate limit (QPS and Burst zero, no RateLimiter)
// gets none, as controller-runtime's GetConfig does (QPS -1): the API
// server's priority and fairness protects it, and a controller throttled
// by its own client lags minutes behind a burst of changes. Set QPS and
// Burst (or a RateLimiter) on cfg to have a client-side limit again.
func New(cfg *rest.Config, opts Options) (*Manager, error) {
	if cfg == nil {
		return nil, errors.New("manager: nil rest.Config")
	}
	if err := opts.checkNested(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	scheme, err := newScheme(opts.AddToScheme)
	if err != nil {
		return nil, err
	}
	cfg = withClientDefaults(cfg)
	if err := registerRESTClientMetrics(opts.Registry, opts.Logger); err != nil {
		return nil, fmt.Errorf("manager: client-go's REST client metrics: %w", err)
	}
	if !opts.KeepKlogOutput {
		routeKlog()
	}
	m := &Manager{cfg: cfg, opts: opts, scheme: scheme, listening: make(chan struct{}),
		projections: map[reflect.Type]schema.GroupVersionKind{}, everyStarter: newStarter(), leaderStarter: newStarter(),
		refs: map[string]int{}, sets: map[string]namespaceSet{}}
	if err := m.newClients(); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	m.keep = opts.Informers.KeepManagedFieldsOfAdded
	if m.keep == nil {
		m.keep = new(intern.FieldManagers)
	}
	fo := snapshotOptions(opts, m.cfg, m.kube)
	fo.KeepManagedFieldsOfAdded = m.keep
	m.factory = informer.NewFactory(fo)
	m.recorder = &recorders{m: m}
	m.api = newAPIProbe(m.probeAPIServer, opts.UnreachableBound)
	certs, err := m.newWebhookServer(scheme)
	if err != nil {
		return nil, err
	}
	if m.received, err = newReceived(opts.Registry); err != nil {
		return nil, err
	}
	if opts.Sharding.Name != "" {
		if m.sharder, err = m.newSharder(); err != nil {
			return nil, err
		}
		m.checks = append(m.checks, check{name: "sharding", ready: true, fn: func(*http.Request) error { return m.sharder.Ready() }})
	}
	if opts.LeaderElection.Name != "" {
		if m.elector, err = election.New(cfg, opts.LeaderElection); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
	}
	if certs != nil {
		if err := certs.watch(m); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
	}
	return m, nil
}

// newClients makes m's read-your-writes ledger, which wraps m.cfg's
// transport, and the HTTP client, clientset and discovery every part of m
// shares.
func (m *Manager) newClients() error {
	led, err := ledger.New(ledger.Options{Bound: m.opts.ReadYourWritesBound, Telemetry: telemetry.Telemetry{Registerer: m.opts.Registry}})
	if err != nil {
		return err
	}
	m.cfg.Wrap(led.Transport) // writes made with a reconcile's context are recorded for its key
	counter, err := newWriteCounter(m.opts.Registry)
	if err != nil {
		return err
	}
	m.cfg.Wrap(counter)
	if tp := m.opts.TracerProvider; tp != nil {
		m.tracer, m.writes = tp.Tracer("github.com/ctrlkit/ctrlkit"), tracing.NewWrites(0)
		m.cfg.Wrap(tracing.Transport(m.tracer, m.writes))
	}
	hc, err := rest.HTTPClientFor(m.cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfigAndClient(listwatch.PreferProtobuf(m.cfg), hc) // built-in types only: protobuf
	if err != nil {
		return err
	}
	disc, err := listwatch.NewDiscovery(m.cfg, hc, m.scheme)
	if err != nil {
		return err
	}
	m.ledger, m.http, m.kube, m.discovery = led, hc, kube, disc
	return nil
}

// newWebhookServer makes m's webhook server, and the keeper of its
// certificates with WebhookCerts (watching once m is made).
func (m *Manager) newWebhookServer(scheme *runtime.Scheme) (*webhookCerts, error) {
	wo := m.opts.Webhook
	wo.Scheme = scheme
	var certs *webhookCerts
	if m.opts.WebhookCerts.Secret != (object.ObjectName{}) {
		var err error
		if certs, err = newWebhookCerts(m.opts.WebhookCerts); err != nil {
			return nil, err
		}
		wo.Certificate = certs.certificate
	}
	var err error
	if m.webhooks, err = webhook.NewServer(wo); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	return certs, nil
}

// snapshotOptions are opts.Informers with snapshots in opts.CacheDir, when
// set, identified by the cluster's kube-system namespace.
func snapshotOptions(opts Options, cfg *rest.Config, kube kubernetes.Interface) informer.FactoryOptions {
	fo := opts.Informers
	switch {
	case opts.CacheDir == "":
		return fo
	case opts.Sharding.Name != "":
		opts.Logger.Warn("manager: CacheDir is ignored with Sharding: caches start cold")
		return fo
	}
	fo.Snapshots.Dir, fo.Snapshots.Server = opts.CacheDir, cfg.Host
	fo.Snapshots.Cluster = func(ctx context.Context) (string, error) {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get namespace %s: %w", metav1.NamespaceSystem, err)
		}
		return string(ns.UID), nil
	}
	return fo
}

// newScheme returns client-go's scheme (Kubernetes' built-in types) with
// the types of adds.
func newScheme(adds []func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	// apiextensions: WhenServed watches CustomResourceDefinitions.
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme}, adds...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("manager: scheme: %w", err)
		}
	}
	return scheme, nil
}

// withClientDefaults returns a copy of cfg with no client-side rate limit
// when it sets none (client-go would apply 5 requests a second, burst 10),
// and client-go's user agent when it has none.
func withClientDefaults(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1 // client-go makes no rate limiter for a negative QPS
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return cfg
}

// Webhooks returns the manager's webhook server: register validators,
// defaulters and conversions with webhook.AddValidator, AddDefaulter and
// AddConversion before Run. Once one is registered, Run serves them over
// HTTPS on Options.Webhook.Addr (a failure to bind fails Run) and /readyz
// waits for the certificate.
func (m *Manager) Webhooks() *webhook.Server { return m.webhooks }

// WebhookAddr returns the address the webhook server is bound to, once
// Run has bound it (waiting for that, or for ctx), or "" when no webhook
// is registered.
func (m *Manager) WebhookAddr(ctx context.Context) string { return m.bound(ctx, &m.webhookAddr) }

// KeepManagedFieldsOf makes the manager's informers keep, of each object's
// metadata.managedFields, the entries of these field managers, beside
// those of Options.Informers.KeepManagedFieldsOf: the entry of its own
// that apply.Apply reads from the cache to send no write that would change
// nothing. A controller set up by a function of its own, out of reach of
// the manager's Options (a Setup(m) as kubebuilder's SetupWithManager),
// calls it with the FieldManager of its applies. It may come before or
// after the informers are made, and while the manager runs: objects
// decoded from then on keep those entries, so call it before Run for a
// restart over unchanged objects to write nothing (an object cached
// earlier, or restored from a snapshot (CacheDir) written while the name
// was not kept, gets its entry when it next changes: until then, an apply
// of it is sent, and changes nothing). A projection's informer made
// while no field manager was named, here or in Options, skips every entry
// on the wire, for good.
func (m *Manager) KeepManagedFieldsOf(fieldManagers ...string) { m.keep.Add(fieldManagers...) }

// Kube returns a clientset for the manager's API server, for writes. It
// speaks protobuf, the cheaper encoding Kubernetes' own types have.
func (m *Manager) Kube() kubernetes.Interface { return m.kube }

// Config returns a copy of the manager's rest.Config, e.g. for a client
// that Client does not provide (dynamic, metadata).
func (m *Manager) Config() *rest.Config { return rest.CopyConfig(m.cfg) }

// Scheme returns the manager's scheme: client-go's types and AddToScheme's.
func (m *Manager) Scheme() *runtime.Scheme { return m.scheme }

// Logger returns the manager's logger.
func (m *Manager) Logger() *slog.Logger { return m.opts.Logger }

// Registry returns the registry served on /metrics; register your own
// metrics on it.
func (m *Manager) Registry() *prometheus.Registry { return m.opts.Registry }

// Add makes Run run r beside the controllers (started after the caches,
// stopped before them). It fails with ErrStarted once Run has started.
func (m *Manager) Add(r Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.once.Before("manager"); err != nil {
		return err
	}
	m.runnables = append(m.runnables, r)
	return nil
}

// Ledger returns the manager's record of writes made for keys
// (ReadYourWrites). The manager's own clients record into it; wrap another
// client's rest.Config with cfg.Wrap(m.Ledger().Transport) to record its
// writes too.
func (m *Manager) Ledger() *ledger.Ledger { return m.ledger }

// Elector returns the manager's leader elector, nil without
// Options.LeaderElection.
func (m *Manager) Elector() *election.Elector { return m.elector }

// Addr returns the address the HTTP listener is bound to ("" when it is
// off), once Run has bound it; it blocks until then, or until Run failed
// to start or ctx ends.
func (m *Manager) Addr(ctx context.Context) string { return m.bound(ctx, &m.addr) }

// MetricsAddr returns the address of the secured metrics listener
// (Options.MetricsAddr) once Run bound it, "" without one; it waits for
// Run to bind its listeners, or ctx to end.
func (m *Manager) MetricsAddr(ctx context.Context) string { return m.bound(ctx, &m.metricsAddr) }

// bound returns *addr, guarded by mu, once Run has bound its listeners
// (or failed to), or ctx ended.
func (m *Manager) bound(ctx context.Context, addr *string) string {
	select {
	case <-m.listening:
	case <-ctx.Done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return *addr
}
