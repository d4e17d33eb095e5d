package manager

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/webhook"
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
	// served (and /debug/pprof/ with EnablePprof). "0" serves nothing;
	// "127.0.0.1:0" a free port of loopback, which Manager.Addr names once
	// Run has bound it (a test reading /metrics or /readyz). Default:
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
	// DebugToken, when set, is the bearer token every client must send to
	// read /debug/ctrlkit's data and pprof, loopback ones included: a proxy
	// in the same Pod (a mesh's sidecar, kube-rbac-proxy) relays remote
	// clients over loopback (see debug.Guard). Run refuses to start when
	// HTTPAddr is not a loopback address, the debug page or pprof is
	// served, and no DebugToken is set. Default: "": loopback clients
	// naming a loopback Host, relayed by no proxy, only.
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
	// started. The files hold the cached objects, Secrets excepted unless
	// Informers.Snapshots.Secrets is set (an emptyDir is the node's disk,
	// where the kubelet keeps no mounted Secret; the Secrets' caches list
	// at every start): each is written 0600 by this process's user, and a
	// missing directory is created 0700. A snapshot becomes the cache, so
	// only what this user
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
	// SelfSubjectAccessReview each, sent while the caches fill (nothing
	// waits for them), and logs every one missing at WARN.
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
	// StartTimeout bounds the start-up check that the API server answers,
	// and the permission checks sent beside the caches. Default: 30s.
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
	// LinkTraceparents, with a TracerProvider, makes every controller take
	// an object's traceparent annotation as a claim of whoever wrote the
	// object: a reconcile starts its own trace linked to it, and a sampled
	// one does not make it traced (see controller.Options.LinkTraceparents;
	// a controller's own options may set it too). Set it where those who
	// may write the watched objects should not pick the traces the
	// operator's spans join. Default: joined (KEP-5915).
	LinkTraceparents bool
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
