package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/informer"
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

// Options configure a Manager. The zero value means the defaults.
type Options struct {
	// AddToScheme registers the API types beyond Kubernetes' built-in ones
	// (client-go's scheme), e.g. a custom resource's AddToScheme. The
	// manager decodes, names and records events about objects through it.
	AddToScheme []func(*runtime.Scheme) error
	// Logger receives every line the manager and its stages log. Default:
	// text to stderr at INFO.
	Logger *slog.Logger
	// Registry receives every metric of the manager's informers, queues
	// and controllers, and is served on /metrics. Default: a new registry
	// with the Go runtime and process collectors.
	Registry *prometheus.Registry
	// HTTPAddr is where /metrics, /healthz, /readyz and /debug/ctrlkit are
	// served (and /debug/pprof/ with EnablePprof). "0" serves nothing. Default:
	// "127.0.0.1:8080", loopback only; ":8080" listens on every interface.
	HTTPAddr string
	// MetricsAddr, when set, serves /metrics over HTTPS on a listener of
	// its own, to clients whose bearer token the API server accepts
	// (TokenReview) for a user allowed get on the non-resource URL
	// /metrics (SubjectAccessReview): a Pod's metrics secured as
	// kubebuilder's scaffold secures them; answers are remembered a minute
	// per token. Its certificate is made at start, self-signed. Manifests
	// sets it to ":8443" and writes the NAME-metrics-reader ClusterRole.
	// Default: "", off (HTTPAddr still serves /metrics, in plain HTTP).
	MetricsAddr string
	// HealthAddr, when set, serves /healthz and /readyz on a listener of
	// their own, e.g. to expose probes but not metrics. Default: "", the
	// probes are served on HTTPAddr.
	HealthAddr string
	// UnreachableBound is how long the API server may go unanswered before
	// /readyz fails, so that a Service stops sending webhook calls to a
	// replica that cannot reach it: no probe of the API server (GET /livez,
	// made when /readyz is asked, at most once a second, with a timeout of
	// a third of the bound, at most 5s) has got an answer for that long, or
	// an informer's lists and watches have failed for that long. /healthz
	// does not fail for it: a restart does not bring the API server back.
	// See the package doc. Default: 15s.
	UnreachableBound time.Duration
	// EnablePprof serves net/http/pprof under /debug/pprof/, to the same
	// clients as /debug/ctrlkit's data (see DebugToken). Default: off.
	EnablePprof bool
	// DebugToken is the bearer token that clients other than loopback ones
	// (and loopback ones naming a foreign Host) must send to read
	// /debug/ctrlkit's data and pprof (see debug.Guard). Run refuses to
	// start when HTTPAddr is not a loopback address, the debug page or pprof
	// is served, and no DebugToken is set. Default: "", loopback clients only.
	DebugToken string
	// DisableDebug stops serving /debug/ctrlkit, the live page of the
	// pipeline (informers, handlers, queues, "explain a key"). Default:
	// served on HTTPAddr.
	DisableDebug bool
	// HTTPIdleTimeout is how long a keep-alive connection to HTTPAddr or
	// HealthAddr may stay idle before the manager closes it. Default: 90s.
	HTTPIdleTimeout time.Duration
	// Informers configure every informer the manager creates. Its Logger
	// and Registerer are the manager's: New refuses them set here
	// (ErrNestedOption). In tests its DetectMutations
	// default checks that no reconcile writes into a cached object, and
	// OnMutation receives what it finds (default: panic); the manager
	// stops its controllers before its informers, so the informers' last
	// check sees every reconcile's writes.
	Informers informer.FactoryOptions
	// CacheDir, when set, keeps every informer's cache across restarts: each
	// writes a snapshot of its cache there at shutdown and every 5 minutes
	// (Informers.Snapshots.Interval), and at the next start resumes from it
	// instead of listing, when it is of the same cluster (the UID of the
	// kube-system namespace, which the manager reads: RBAC get on
	// namespaces), server, resource, namespace, selectors and Go type, and
	// the server still has the history after it (see informer.Snapshot).
	// Mount an emptyDir volume there: it survives a container's restarts,
	// not the Pod's. /readyz?verbose and the debug page say how each cache
	// started. The files hold the cached objects (Secrets too, if cached):
	// each is written 0600 by this process's user, and a missing directory
	// is created 0700. A snapshot becomes the cache, so only what this user
	// wrote is read: the snapshots are kept in CacheDir when it is the
	// user's and no one else can write it, and in a private folder
	// "ctrlkit-<uid>" made inside it (mode 0700) when other users can
	// write it, as they can an emptyDir's mount point (root's, mode 0777)
	// or /tmp; each must be authenticated by the key kept beside it
	// (snapshot.KeyFile). Otherwise (a directory of another user that no
	// one else can write, or a "ctrlkit-<uid>" that another user made
	// first or that is a link) the caches start cold, saying why, and
	// nothing is written there (see snapshot.PrepareDir). Snapshots are
	// off with Sharding (a replica's share is decided after it starts).
	// Default: "", off.
	CacheDir string
	// ShutdownTimeout is each controller's default bound on in-flight
	// reconciles at shutdown; see controller.Options. Default: 30s.
	ShutdownTimeout time.Duration
	// CacheSyncTimeout is each controller's default wait before it logs
	// the caches that have not synced; see controller.Options. Default: 2m.
	CacheSyncTimeout time.Duration
	// WebhookCerts, when its Secret is set, keeps the webhook server's
	// certificate authority and serving certificate in that Secret and
	// writes the authority into the webhook configurations and conversion
	// CRDs, without cert-manager (see WebhookCerts). Default: off, the
	// server reads Webhook.CertDir.
	WebhookCerts WebhookCerts
	// CRDs are the CustomResourceDefinitions of the program's own types
	// (controller-gen's output, embedded), for Manifests, which sets the
	// conversion webhook of every kind the program converts. Default: none.
	CRDs fs.FS
	// Permissions are the API verbs the controllers need beyond listing
	// and watching their informers' resources (which are checked anyway),
	// e.g. create on deployments.apps. Run checks them at start with one
	// SelfSubjectAccessReview each and logs every one missing at WARN.
	Permissions []Permission
	// RequireServedKinds makes Run fail at start when the server does not
	// serve a kind one of the informers needs, instead of waiting for its
	// CRD to be installed (see Informer). Default: wait.
	RequireServedKinds bool
	// LeaderElection, when its Name is set, makes the controllers (except
	// those with ControllerOptions.EveryReplica) and the runnables (except
	// a LeaderElectionRunnable answering false) run only on the replica
	// holding that Lease; informers run on
	// every replica, so a standby is warm and its queue already holds every
	// cached key when it takes over. Losing the lease cancels in-flight
	// reconciles at once and makes Run return an error wrapping
	// election.ErrLost: exit and let the Pod restart, as controller-runtime
	// does (a fresh process starts from fresh caches and queues). On a
	// graceful stop the lease is released once the controllers stopped.
	// Its Logger and Registerer are the manager's (set here, New refuses
	// them: ErrNestedOption). Default: off.
	LeaderElection election.Options
	// ReadYourWritesBound is the longest a key of a controller with
	// ControllerOptions.ReadYourWrites waits for its writes. Default: 5s.
	ReadYourWritesBound time.Duration
	// Sharding, when its Name is set, spreads the controllers' keys over
	// every replica running in the same ring, each caching only its share
	// (see Sharding). Exclusive with LeaderElection. Default: off.
	Sharding Sharding
	// StartTimeout bounds the start-up check that the API server answers.
	// Default: 30s.
	StartTimeout time.Duration
	// TracerProvider, if set, traces every controller's reconciles and the
	// writes made with their contexts through the manager's connections:
	// a span per reconcile linked to every event merged into it, a span
	// per write, self-triggered reconciles counted (see package tracing).
	// A controller's own ControllerOptions.Tracer wins. Default: none,
	// and tracing costs nothing.
	TracerProvider trace.TracerProvider
	// TraceSampling, with a TracerProvider, is the share of events whose
	// reconciles are traced, drawn as each event is queued (see
	// controller.Options.TraceSampling, which a controller's own options
	// may set): the cheap way to sample. At 0.01, with the provider's
	// sampler ParentBased(AlwaysSample), the CPU per event measured within
	// noise of no tracing, against 1.14x for the provider's
	// TraceIDRatioBased(0.01) (every reconcile then starts a span the
	// sampler drops; docs/tour.md). Default: every event, the provider's
	// sampler deciding.
	TraceSampling float64
	// KeepKlogOutput leaves klog, client-go's logger (leader election, API
	// deprecation warnings, ...), as it is: text to stderr in klog's format,
	// or what the program set with klog.SetLogger. Default: klog's output
	// goes to Logger while Run runs (see the package doc, "client-go's
	// metrics and logs").
	KeepKlogOutput bool
	// Webhook configures the HTTPS listener of the admission and
	// conversion webhooks registered with Webhooks: its address (default
	// ":9443") and the directory of its certificate (CertDir, required
	// once a webhook is registered). Its Telemetry and Scheme are the
	// manager's (set here, New refuses them: ErrNestedOption). Without a registered webhook nothing listens.
	Webhook webhook.Options
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = "127.0.0.1:8080"
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = 2 * time.Minute
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	o.Informers.Logger = o.Logger
	o.Informers.Registerer = o.Registry
	o.LeaderElection.Logger = o.Logger
	o.LeaderElection.Registerer = o.Registry
	o.Webhook.Logger = o.Logger
	o.Webhook.Registerer = o.Registry
	return o
}

// ErrNestedOption is New's error for a logger, registerer or scheme set in
// Options.Informers, LeaderElection or Webhook: those are the manager's
// (Options.Logger, Registry, AddToScheme), set in one place only.
var ErrNestedOption = errors.New("manager: set the logger, registry and scheme on manager.Options, not in its nested options")

// checkNested refuses what withDefaults would overwrite.
func (o Options) checkNested() error {
	var set []string
	for name, isSet := range map[string]bool{
		"Informers.Logger": o.Informers.Logger != nil, "Informers.Registerer": o.Informers.Registerer != nil,
		"LeaderElection.Logger": o.LeaderElection.Logger != nil, "LeaderElection.Registerer": o.LeaderElection.Registerer != nil,
		"Webhook.Logger": o.Webhook.Logger != nil, "Webhook.Registerer": o.Webhook.Registerer != nil,
		"Webhook.Scheme": o.Webhook.Scheme != nil,
	} {
		if isSet {
			set = append(set, name)
		}
	}
	if len(set) > 0 {
		slices.Sort(set)
		return fmt.Errorf("%w: %s", ErrNestedOption, strings.Join(set, ", "))
	}
	return nil
}

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

	fleets      []*fleet.Fleet                           // NewFleet's, for the debug page; guarded by mu
	clients     map[reflect.Type]any                     // T → *client.Client[T], made by Client; guarded by mu
	projections map[reflect.Type]schema.GroupVersionKind // projection type → its full type's kind; guarded by mu
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
	m.factory = informer.NewFactory(snapshotOptions(opts, m.cfg, m.kube))
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

// Run runs everything until ctx ends: it binds the HTTP listener, checks
// that the API server answers and which permissions are missing, starts
// the informers, then each controller (whose workers start once its own
// caches synced, independently of the others) and the runnables. A
// failure to start is returned at once with nothing left running.
//
// When ctx ends, controllers stop taking keys and let in-flight reconciles
// finish (see Options.ShutdownTimeout), runnables stop, then the informers
// and the listener. Run returns after every goroutine it started has
// exited: nil after a clean shutdown, else the first error. It can be
// called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if err := m.once.Start("manager"); err != nil {
		m.mu.Unlock()
		return err
	}
	ctrls, runnables := slices.Clone(m.controllers), slices.Clone(m.runnables)
	errs := errors.Join(append(slices.Clone(m.errs), m.checkDebug())...)
	m.mu.Unlock()
	defer m.stop()
	defer context.AfterFunc(ctx, m.stop)()
	if !m.opts.KeepKlogOutput {
		defer joinKlogRoute(m.opts.Logger)()
	}
	defer m.closeConnections()
	if errs != nil {
		close(m.listening)
		return errs
	}

	servers, err := m.listen()
	close(m.listening)
	if err != nil {
		return err
	}
	if err := m.preflight(ctx); err != nil {
		for _, s := range servers {
			s.ln.Close()
		}
		return err
	}
	m.opts.Logger.Info("manager: starting", "controllers", len(ctrls), "http", m.Addr(ctx))
	m.planSharding(ctrls)
	err = runStages(ctx, []stage{
		{"http", append(serving(servers, m.opts.Logger), m.api.run)},
		{"caches", []func(context.Context) error{m.factory.Run}},
		{"events", []func(context.Context) error{m.recorder.started(ctx)}},
		{"work", m.work(ctrls, runnables)},
	})
	if err != nil {
		m.opts.Logger.Error("manager: stopped with an error", "err", err)
		return err
	}
	m.opts.Logger.Info("manager: stopped")
	return nil
}

// stage is a group of runnables the manager starts together.
type stage struct {
	name string
	runs []func(context.Context) error
}

// runStages starts the stages in order, each under a context of its own,
// and runs them until ctx ends or a runnable fails; then it stops them in
// reverse order, each after the one started after it has returned, so
// work stops before the caches it reads and the caches before the
// listener that reports on them. It returns the first error.
func runStages(ctx context.Context, stages []stage) error {
	stop, stopAll := context.WithCancelCause(ctx)
	defer stopAll(nil)
	var (
		mu    sync.Mutex
		first error
	)
	type running struct {
		cancel context.CancelCauseFunc
		wg     sync.WaitGroup
	}
	rs := make([]*running, len(stages))
	for i, st := range stages {
		sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		r := &running{cancel: cancel}
		rs[i] = r
		for _, run := range st.runs {
			r.wg.Go(func() {
				if err := run(sctx); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					stopAll(err)
				}
			})
		}
	}
	<-stop.Done()
	cause := context.Cause(stop) // ctx's cause (e.g. controller.ErrStopNow), or the first error
	for _, r := range slices.Backward(rs) {
		r.cancel(cause)
		r.wg.Wait()
	}
	return first
}

// serving returns a runnable per HTTP server: it serves until its context
// ends, then shuts the server down (in-flight requests get 5s). A server
// that fails is logged; the manager goes on without it.
func serving(servers []server, log *slog.Logger) []func(context.Context) error {
	var runs []func(context.Context) error
	for _, s := range servers {
		runs = append(runs, func(ctx context.Context) error {
			served := make(chan error, 1)
			go func() { served <- s.srv.Serve(s.ln) }()
			select {
			case err := <-served:
				log.Error("manager: HTTP server stopped", "addr", s.ln.Addr().String(), "err", err)
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = s.srv.Shutdown(sctx)
				<-served
			}
			return nil
		})
	}
	return runs
}

// work returns the runnables of the work stage: the controllers and
// runnables, with leader election those that need the lease only while
// this replica holds it (through the elector; the others, and the
// informers, run on every replica: a warm standby), and the sharder.
func (m *Manager) work(ctrls []controllerEntry, runnables []Runnable) []func(context.Context) error {
	for _, c := range ctrls {
		m.starterFor(c).add(c)
	}
	every, leaderOnly := []func(context.Context) error{m.everyStarter.run}, []func(context.Context) error{m.leaderStarter.run}
	for _, r := range runnables {
		if n, ok := r.(LeaderElectionRunnable); m.elector != nil && (!ok || n.NeedLeaderElection()) {
			leaderOnly = append(leaderOnly, r.Run)
			continue
		}
		every = append(every, r.Run)
	}
	if m.elector != nil {
		every = append(every, func(ctx context.Context) error { return m.elector.Run(ctx, fenced(leaderOnly)) })
	}
	if m.sharder != nil {
		every = append(every, m.sharder.Run)
	}
	return every
}

// stop refuses controllers from now on: Run is ending.
func (m *Manager) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopping = true
}

// fenced runs fns together while this replica leads. When the lease is
// lost, their context ends with controller.ErrStopNow (and election.ErrLost):
// controllers cancel in-flight reconciles at once instead of letting them
// finish, since another replica is about to take over.
func fenced(fns []func(context.Context) error) func(context.Context) error {
	return func(lead context.Context) error {
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(lead))
		stop := context.AfterFunc(lead, func() {
			cause := context.Cause(lead)
			if errors.Is(cause, election.ErrLost) {
				cause = fmt.Errorf("%w: %w", controller.ErrStopNow, cause)
			}
			cancel(cause)
		})
		defer stop()
		defer cancel(nil)
		g, gctx := errgroup.WithContext(ctx)
		for _, fn := range fns {
			g.Go(func() error { return fn(gctx) })
		}
		return g.Wait()
	}
}

// closeConnections closes the manager's idle HTTP connections, so their
// goroutines end with Run. A watch stream whose context was cancelled is
// torn down asynchronously by the HTTP/2 transport, and its connection
// becomes idle a moment later: close a few times over 100ms.
func (m *Manager) closeConnections() {
	for i := range 3 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		utilnet.CloseIdleConnectionsFor(m.http.Transport)
	}
}

// server is one bound HTTP listener and what it serves.
type server struct {
	srv *http.Server
	ln  net.Listener
}

// listen binds the HTTP listeners: none when HTTPAddr is "0", a second one
// for the probes with HealthAddr. On failure nothing stays bound.
func (m *Manager) listen() ([]server, error) {
	var out []server
	bind := func(addr, option string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return fmt.Errorf("manager: HTTP listener (Options.%s): %w", option, err)
		}
		out = append(out, server{srv: m.newServer(h), ln: ln})
		return nil
	}
	if m.opts.HTTPAddr != "0" {
		if err := bind(m.opts.HTTPAddr, "HTTPAddr", m.handler(m.opts.HealthAddr == "")); err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.addr = out[0].ln.Addr().String()
		m.mu.Unlock()
	}
	if m.opts.HealthAddr != "" {
		if err := bind(m.opts.HealthAddr, "HealthAddr", m.probes(http.NewServeMux())); err != nil {
			return nil, err
		}
	}
	if m.opts.MetricsAddr != "" {
		tlsCfg, err := selfSignedTLS()
		if err == nil {
			mux := http.NewServeMux()
			mux.Handle("/metrics", newMetricsAuth(m.kube, promhttp.HandlerFor(m.opts.Registry, promhttp.HandlerOpts{Registry: m.opts.Registry}), m.opts.Logger))
			err = bind(m.opts.MetricsAddr, "MetricsAddr", mux)
		}
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return nil, err
		}
		last := &out[len(out)-1]
		m.mu.Lock()
		m.metricsAddr = last.ln.Addr().String()
		m.mu.Unlock()
		last.ln = tls.NewListener(last.ln, tlsCfg)
	}
	if len(m.webhooks.Paths()) > 0 {
		srv, err := m.bindWebhooks()
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return nil, err
		}
		out = append(out, srv)
	}
	return out, nil
}

// bindWebhooks binds the webhook server's HTTPS listener. Its server is
// the webhook package's (webhook.Server.HTTPServer), with the limits of
// Options.Webhook.Limits rather than the manager's: a review holds up to
// two objects of the API server's largest size, and the webhook server
// bounds the reviews and bytes in flight itself.
func (m *Manager) bindWebhooks() (server, error) {
	// A certificate kept in a Secret (WebhookCerts) comes once the manager
	// runs: /readyz waits for it instead.
	if err := m.webhooks.Ready(); err != nil && m.opts.WebhookCerts.Secret == (object.ObjectName{}) {
		return server{}, fmt.Errorf("manager: webhooks %v are registered: %w", m.webhooks.Paths(), err)
	}
	ln, err := net.Listen("tcp", m.webhooks.Options().Addr)
	if err != nil {
		return server{}, fmt.Errorf("manager: webhook listener (Options.Webhook.Addr): %w", err)
	}
	m.mu.Lock()
	m.webhookAddr = ln.Addr().String()
	m.checks = append(m.checks, check{name: "webhook", ready: true, fn: func(*http.Request) error { return m.webhooks.Ready() }})
	m.mu.Unlock()
	srv := m.webhooks.HTTPServer()
	return server{srv: srv, ln: tls.NewListener(ln, srv.TLSConfig)}, nil
}
