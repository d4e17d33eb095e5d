// Package fleet runs one controller over a changing set of clusters: one
// work queue, fair between clusters, whose keys name the cluster
// (Key{Cluster, ObjectName}); each engaged cluster gets its own informers
// of the fleet's sources (For, Owns, Watches: added, and removed with
// Cache.Remove, before or while the fleet runs), and a cluster that leaves
// takes its informers, goroutines, metrics and cache with it (its idle
// connections are closed by client-go's transport, shared by every client
// of the same server and TLS configuration, after its idle timeout).
// Clusters join and leave by
// Engage and Disengage, called by a provider: Directory (a folder of
// kubeconfig files), Secrets (Cluster API's kubeconfig Secrets) or one's
// own.
//
// A reconcile finds its key's cluster with ClusterFrom(ctx): its name, a
// typed client of any type (Client), a clientset (Cluster.Kube), all
// sharing the fleet's connections to that cluster.
//
// With Options.Ring the clusters are spread over the replicas of a Lease
// ring (package shard), each moved by drain-then-release; a cluster named
// in Options.Spread has its objects spread instead, one by one. DebugSource is
// the fleet for package debug's page: a row per cluster's informer, and
// keys explained. PerCluster runs a reconciler written for one cluster
// over every cluster; manager.NewFleet runs a fleet with a manager.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
)

// Key names an object in one cluster of the fleet.
type Key struct {
	Cluster string
	object.ObjectName
}

// String renders the key as "cluster/namespace/name" ("cluster/name" for a
// cluster-scoped object).
func (k Key) String() string { return k.Cluster + "/" + k.ObjectName.String() }

// Options configure a Fleet.
type Options struct {
	// Scheme holds the types of the fleet's sources. Default: client-go's
	// (Kubernetes' own types).
	Scheme *runtime.Scheme
	// Controller configures the fleet's one controller. Its queue's flows
	// default to the cluster (Fairness.FlowKey): a cluster with a burst of
	// changes takes its turn with the others instead of starving them.
	// Workers default to 4 here (a controller's own default is 1: one
	// reconcile waiting on a cluster whose server stopped answering would
	// hold every other cluster's keys). From 4 Workers up, a cluster's
	// keys in flight default to all of them but a quarter, rounded down
	// (Fairness.MaxInFlight: 3 of 4, 6 of 8): that quarter stays free for the
	// other clusters, whose keys then wait for no reconcile of the busy or
	// unreachable one to end; set MaxInFlight to -1 for no cap.
	Controller controller.Options[Key]
	// Ring, when named, spreads the clusters over the replicas running the
	// same ring (see package shard): each engages only the clusters whose
	// name hashes into the virtual shards it holds, and reconciles a key
	// only while its cluster's shard is open here. A cluster moves by
	// drain-then-release: the replica giving it up closes its shard, waits
	// for its reconciles, then releases it in the ring's table; only then
	// does the next one claim it, engage it and reconcile its objects
	// (never two replicas at once, and no wait for a lease to expire).
	// Ring.Key is not used: clusters are hashed by name. A provider runs on
	// every replica and offers every cluster; Engaged and Clusters report
	// those offered, Here those engaged on this replica. A replica releases
	// each shard it gives up once that shard's reconciles returned: a
	// reconcile hanging on a server that stopped answering holds back only
	// its own shard's clusters, until DrainTimeout cancels it.
	Ring shard.Ring
	// DrainTimeout bounds how long a replica giving up a shard of the Ring
	// waits for that shard's reconciles before it cancels their contexts
	// (it still waits for them to return; only then does the shard move).
	// Default: 30s, as shard.SharderOptions.
	DrainTimeout time.Duration
	// Spread names clusters too big for one replica (it needs Ring): every
	// replica engages each of them, and reconciles a key of theirs only
	// while the shard its "cluster/namespace/name" hashes into is open
	// here, so their objects, not each cluster as a whole, are spread over
	// the replicas and move by drain-then-release as clusters do. A
	// replica caches only its share of a spread cluster: the For objects
	// whose keys fall in the shards it holds or is acquiring, and the Owns
	// objects they control (a Watches source's informer keeps every
	// object). The API server cannot select by these keys, so the informers
	// filter on the client (every object is still received), and list
	// again when the replica's shards change, before it opens new ones.
	Spread []string
	// MaxResponseBytes bounds each response an engaged cluster's API
	// server sends, but a watch's (whose events are bounded one by one, at
	// 16 MiB, and a JSON object at 64 MiB of what it would decode into):
	// a list page or discovery answer past it fails (the informer
	// retries and reports the error). Whoever writes a provider's
	// kubeconfigs chooses the servers; without a bound, one could send a
	// list without end and the process would hold it until it ran out of
	// memory, stopping every cluster. Default: 512 MiB; -1: none.
	MaxResponseBytes int64
	// Informers configure every engaged cluster's informers, as
	// manager.Options.Informers does a manager's: KeepManagedFieldsOf
	// (apply.Apply then skips a write the cached object already holds),
	// mutation detection and OnMutation, interning, the reflector. Their
	// Telemetry is Controller.Telemetry's, and Snapshots are not taken.
	// manager.NewFleet gives the manager's when this is left zero.
	Informers informer.FactoryOptions
	// ProbeInterval is how often each engaged cluster's API server is asked
	// whether it answers (GET /livez, bounded by the interval). A cluster
	// whose last probe got no answer reports it in Cluster.Err, Status and
	// ctrlkit_fleet_cluster_up until one is answered, and a ring's replica
	// waits for it no longer. Without the probe, a server that stops
	// answering (a stopped process, a partition that drops packets) is
	// noticed only when requests to it time out, a watch's after about 45
	// seconds. Default: 5s; negative: no probe.
	ProbeInterval time.Duration
	// RingConfig reaches the cluster where the ring's Leases live (the
	// management cluster). Required with Ring. The fleet makes its own
	// client of it, with no client-side rate limit: a renewal must never
	// wait behind other requests (a lapse stops every cluster at once).
	RingConfig *rest.Config
}

// defaultMaxResponseBytes is Options.MaxResponseBytes's default.
const defaultMaxResponseBytes = 512 << 20

// Fleet is one controller over the clusters engaged in it. Make one with
// New, add sources with For, Run it, and Engage clusters (sources and
// clusters before or while it runs). Safe for concurrent use.
type Fleet struct {
	opts    Options
	ctrl    *controller.Controller[Key]
	metrics *metrics
	// serializer decodes every cluster's objects: the scheme's codecs,
	// made once.
	serializer runtime.NegotiatedSerializer

	sharder *shard.Sharder  // with Options.Ring
	spread  map[string]bool // Options.Spread

	mu      sync.Mutex
	sources []source
	primary schema.GroupKind // For's kind
	// offered are the clusters engaged (by a provider), clusters those of
	// them engaged on this replica: all of them without a ring.
	offered  map[string]*rest.Config
	clusters map[string]*member
	refused  map[string]error // clusters whose last Engage failed, until engaged or disengaged, and engaged ones whose last change was refused (see Refused)
	ctx      context.Context  // Run's; nil before Run
	closed   bool             // Run has returned
	wake     chan struct{}    // Run's start
	// watched are the providers' own caches (Secrets'), by name: Ready
	// reports one that has not listed yet, with its last error.
	watched map[string]watchedCache
}

// watchedCache is a provider's cache, as Ready reads it.
type watchedCache struct {
	synced  func() bool
	lastErr func() error
}

// watch adds a provider's cache, called name, to what Ready reports, until
// the returned func is called.
func (f *Fleet) watch(name string, c watchedCache) (unwatch func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watched == nil {
		f.watched = map[string]watchedCache{}
	}
	f.watched[name] = c
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.watched, name)
	}
}

// Logger returns the fleet's logger: Options.Controller's
// (Telemetry.Logger), else slog.Default(). The providers of this package
// log through it unless given a logger of their own.
func (f *Fleet) Logger() *slog.Logger {
	if l := f.opts.Controller.Telemetry.Logger; l != nil {
		return l
	}
	return slog.Default()
}

// Errors of Engage and Disengage.
var (
	ErrEngaged    = errors.New("fleet: cluster engaged already")
	ErrNotEngaged = errors.New("fleet: no such cluster engaged")
	ErrStopped    = errors.New("fleet: stopped")
)

// defaultWorkers is a fleet controller's Workers when Options leave them
// 0: the fewest that leave one free of any one cluster's keys.
const defaultWorkers = 4

// New returns a fleet whose controller reconciles with rec. A key whose
// cluster has left the fleet is dropped, not reconciled; a reconcile finds
// its key's cluster (its clients) with ClusterFrom(ctx).
func New(rec controller.Reconciler[Key], opts Options) (*Fleet, error) {
	if rec == nil {
		return nil, errors.New("fleet: nil reconciler")
	}
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
	}
	if opts.Controller.Fairness.FlowKey == nil {
		opts.Controller.Fairness.FlowKey = func(k Key) string { return k.Cluster }
	}
	switch {
	case opts.MaxResponseBytes == 0:
		opts.MaxResponseBytes = defaultMaxResponseBytes
	case opts.MaxResponseBytes < 0:
		opts.MaxResponseBytes = 0 // none
	}
	switch {
	case opts.ProbeInterval == 0:
		opts.ProbeInterval = defaultProbeInterval
	case opts.ProbeInterval < 0:
		opts.ProbeInterval = 0 // none
	}
	if opts.Controller.Workers == 0 {
		opts.Controller.Workers = defaultWorkers
	}
	if w := opts.Controller.Workers; opts.Controller.Fairness.MaxInFlight == 0 && w >= 4 {
		opts.Controller.Fairness.MaxInFlight = w - w/4
	}
	f := &Fleet{opts: opts, offered: map[string]*rest.Config{}, clusters: map[string]*member{}, refused: map[string]error{}, wake: make(chan struct{}),
		serializer: serializer.NewCodecFactory(opts.Scheme).WithoutConversion()}
	if len(opts.Spread) > 0 && opts.Ring.Name == "" {
		return nil, errors.New("fleet: Options.Spread needs Options.Ring (the replicas to spread the clusters' objects over)")
	}
	for _, name := range opts.Spread {
		if f.spread == nil {
			f.spread = map[string]bool{}
		}
		f.spread[name] = true
	}
	if opts.Ring.Name != "" {
		if opts.Controller.Partition != nil {
			return nil, errors.New("fleet: Options.Ring and Options.Controller.Partition are exclusive: the ring partitions the keys by cluster")
		}
		var err error
		if f.sharder, err = f.newSharder(); err != nil {
			return nil, err
		}
		opts.Controller.Partition = ringPartition{f}
	}
	c, err := controller.New[Key](controller.ReconcileFunc[Key](func(ctx context.Context, k Key) (controller.Result, error) {
		c, ok := f.Cluster(k.Cluster)
		if !ok {
			return controller.Result{}, nil // the cluster left: nothing to do there
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		untrack, ok := c.member.track(cancel)
		if !ok {
			return controller.Result{}, nil // it left meanwhile
		}
		// Counted as it ends (a panic, which the controller recovers above
		// this function, as an error), unless the cluster left meanwhile.
		err := errPanicked
		defer untrack(func() { f.metrics.reconciled(k.Cluster, err) })
		var res controller.Result
		res, err = rec.Reconcile(context.WithValue(ctx, clusterKey{}, c), k)
		return res, err
	}), opts.Controller)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.ctrl = c
	if f.metrics, err = newMetrics(f); err != nil {
		c.Close()
		return nil, fmt.Errorf("fleet: %w", err)
	}
	return f, nil
}

// Controller returns the fleet's controller (its queue, Stats, KeyStats).
func (f *Fleet) Controller() *controller.Controller[Key] { return f.ctrl }

// Run runs the controller and every engaged cluster's informers until ctx
// ends; then it disengages every cluster and returns once all stopped. It
// can be called once.
func (f *Fleet) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.ctx != nil || f.closed {
		f.mu.Unlock()
		return errors.New("fleet: Run called twice")
	}
	f.ctx = ctx
	pending := make([]*member, 0, len(f.clusters))
	for _, m := range f.clusters {
		pending = append(pending, m)
	}
	f.mu.Unlock()
	for _, m := range pending {
		m.start(ctx)
	}
	var sharded chan error
	if f.sharder != nil {
		sharded = make(chan error, 1)
		go func() { sharded <- f.sharder.Run(ctx) }()
	}
	err := f.ctrl.Run(ctx)
	if sharded != nil {
		err = errors.Join(err, <-sharded)
	}
	f.mu.Lock()
	f.closed = true
	names := sortedKeys(f.offered)
	f.mu.Unlock()
	for _, name := range names {
		_ = f.Disengage(name)
	}
	if f.metrics != nil {
		f.metrics.series.Unregister()
	}
	return err
}

// Engage adds the cluster called name, reached with cfg: each source gets
// an informer there, started at once if the fleet runs, whose objects are
// reconciled as Key{Cluster: name, ...}. It fails on an empty or engaged
// name, a cfg that cannot be used, and after Run returned (ErrStopped).
// A cfg with no client-side rate limit set (QPS and Burst zero, no
// RateLimiter) gets none, as the manager's: the cluster's API server
// protects itself with priority and fairness.
func (f *Fleet) Engage(name string, cfg *rest.Config) error {
	if err := checkName(name); err != nil {
		return err
	}
	cfg = withFleetDefaults(cfg)
	if _, err := rest.HTTPClientFor(cfg); err != nil { // a cluster another replica works on is checked too
		return f.refuse(name, fmt.Errorf("fleet: cluster %s: %w", name, err))
	}
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return fmt.Errorf("fleet: engage %s: %w", name, ErrStopped)
	case f.offered[name] != nil:
		f.mu.Unlock()
		return fmt.Errorf("fleet: engage %s: %w", name, ErrEngaged)
	}
	f.offered[name] = cfg
	delete(f.refused, name)
	f.mu.Unlock()
	if !f.local(name) {
		return nil // another replica's, until the ring says otherwise
	}
	if _, err := f.engageHere(name, cfg); err != nil {
		f.mu.Lock()
		if f.offered[name] == cfg {
			delete(f.offered, name)
		}
		f.mu.Unlock()
		return f.refuse(name, err)
	}
	return nil
}

// refuse records that the cluster called name could not be engaged, for
// Refused, and returns err.
func (f *Fleet) refuse(name string, err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.offered[name] == nil { // not engaged again meanwhile
		f.refused[name] = err
	}
	return err
}

// checkName refuses a cluster name that could not label a metric or print
// in a log line as it is: empty, not UTF-8, or holding control characters
// (a name from a file name or a custom provider's data).
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("fleet: a cluster needs a name")
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("fleet: cluster name %q: not UTF-8 text without control characters", name)
	}
	return nil
}

// changeFailed records that a provider's change of the cluster called
// name (a kubeconfig that cannot be used, or an Update that failed) did
// not take, logs it, and reports whether the cluster still runs. A cluster
// still engaged runs on with its previous configuration and is listed by
// Refused until a change takes: a typo or a half-written rotation does not
// stop a cluster that runs. One no longer engaged (an Update to another
// server that could not engage it) is refused as an Engage that failed.
func (f *Fleet) changeFailed(name string, err error, log *slog.Logger, attrs ...any) (running bool) {
	f.mu.Lock()
	running = f.offered[name] != nil
	if running {
		f.refused[name] = err
	}
	f.mu.Unlock()
	attrs = append([]any{"cluster", name}, append(attrs, "err", err)...)
	if running {
		log.Warn("fleet: kubeconfig change refused: the cluster runs on with its previous kubeconfig", attrs...)
		return true
	}
	_ = f.refuse(name, err)
	log.Warn("fleet: cluster not engaged", attrs...)
	return false
}

// unrefuse forgets that the cluster called name was refused (its
// provider withdrew it).
func (f *Fleet) unrefuse(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.refused, name)
}

// redactedHost is a kubeconfig's server as logs may show it: a user and
// password written in its URL replaced by "xxxxx".
func redactedHost(host string) string {
	if u, err := url.Parse(host); err == nil && u.User != nil {
		return u.Redacted()
	}
	if strings.Contains(host, "@") {
		return "(a server address with credentials, not shown)"
	}
	return host
}

// Refused returns the clusters a provider offered that could not be
// engaged (a kubeconfig that makes no client, sources that could not be
// built), sorted by name, each with its error, until Engage succeeds for
// it or it is disengaged (a provider withdraws it); and the engaged
// clusters whose kubeconfig a provider saw change to one it refused,
// which run on with their previous one until a usable change (Update) or
// their removal. Providers only log
// these; Refused and the ctrlkit_fleet_clusters_refused gauge let a
// program or a dashboard see them.
func (f *Fleet) Refused() []ClusterStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ClusterStatus, 0, len(f.refused))
	for _, name := range sortedKeys(f.refused) {
		out = append(out, ClusterStatus{Name: name, Err: f.refused[name]})
	}
	return out
}

// engageHere builds the cluster's member and starts it if the fleet runs,
// unless the cluster was disengaged, engaged again or placed here
// meanwhile (nil, nil).
func (f *Fleet) engageHere(name string, cfg *rest.Config) (*member, error) {
	m, err := f.newMember(name, cfg)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		m.close()
		return nil, fmt.Errorf("fleet: engage %s: %w", name, ErrStopped)
	case f.clusters[name] != nil || f.offered[name] != cfg:
		f.mu.Unlock()
		m.close()
		return nil, nil
	}
	f.clusters[name] = m
	ctx, sources := f.ctx, slices.Clone(f.sources)
	f.mu.Unlock()
	if ctx != nil {
		m.start(ctx)
	}
	// A source added or removed while m was built: from here on, For, Owns,
	// Watches and Remove see m among the clusters.
	if failed := m.follow(f, sources); len(failed) > 0 {
		// A source whose add failed and rolled it back is missing nowhere;
		// any other makes the cluster refused.
		var errs []error
		f.mu.Lock()
		for i, err := range failed {
			if !f.sources[i].removed {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 && f.clusters[name] == m {
			delete(f.clusters, name)
		}
		f.mu.Unlock()
		if len(errs) > 0 {
			m.close()
			f.metrics.disengaged(name)
			return nil, errors.Join(errs...)
		}
	}
	return m, nil
}

// Disengage removes the cluster called name: its informers stop, their
// handlers leave the controller, its metrics are unregistered, and its
// keys still queued are dropped unreconciled (its connections, idle,
// close after client-go's idle timeout). It returns once all of that is done
// (a server that stopped answering does not hold it up: every request to it
// ends with its context); the contexts of its keys' reconciles in flight
// are cancelled, with a cause that says so (context.Cause). A refused
// cluster (see Refused) is forgotten; any other unknown name is
// ErrNotEngaged.
func (f *Fleet) Disengage(name string) error {
	f.mu.Lock()
	cfg, m := f.offered[name], f.clusters[name]
	_, refused := f.refused[name]
	delete(f.offered, name)
	delete(f.clusters, name)
	delete(f.refused, name)
	f.mu.Unlock()
	if refused && cfg == nil {
		return nil // withdrawn: it is no longer refused
	}
	if cfg == nil {
		return fmt.Errorf("fleet: disengage %s: %w", name, ErrNotEngaged)
	}
	if m != nil {
		m.close()
		f.metrics.disengaged(name)
	}
	return nil
}

// Engaged reports whether the cluster called name is engaged (on this
// replica or, with a ring, on another).
func (f *Fleet) Engaged(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offered[name] != nil
}

// Clusters returns the engaged clusters' names, sorted (with a ring, Here
// returns those engaged on this replica).
func (f *Fleet) Clusters() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.offered)
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// member is one engaged cluster: its connections and its sources'
// informers.
type member struct {
	name      string
	hc        *http.Client
	transport *swapTransport // hc's, replaced when credentials rotate (Update)
	discovery listwatch.Discovery
	cluster   *Cluster

	mu sync.Mutex
	// runs are the sources' informers here, by the source's place in the
	// fleet's sources; nil where a source was removed. Read them with
	// sources.
	runs    []*sourceRun
	ctx     context.Context // once started; the runs' parent
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the informers' goroutines and the probe
	stopped bool
	// reconciles cancels the reconciles in flight of the cluster's keys,
	// by an id of each; close calls them (see track).
	reconciles    map[uint64]context.CancelCauseFunc
	nextReconcile uint64

	health   health                     // the probe's finding
	probeDC  *discovery.DiscoveryClient // the probe's requests; nil: no probe
	interval time.Duration              // the probe's
}

// sourceRun is one source's informer in one cluster.
type sourceRun struct {
	run     func(context.Context) error
	synced  func() bool
	lastErr func() error
	remove  func() // its handler's registration
	close   func() // the informer's Close: its metrics unregistered
	reader  any    // store.Reader[T]
	// primaries lists the cached objects' names, and cache looks one up
	// (for the debug page), for the For source only.
	primaries func() []object.ObjectName
	cache     debug.Cache
	// For the debug page: the informer's snapshot, its kind and scope.
	stats func() informer.Stats
	kind  string
	scope Scope
	// relist lists again an informer cut to this replica's share of a
	// spread cluster, once its shards changed; nil for others.
	relist func(context.Context, error) error

	stop func()        // ends run's context, once started
	done chan struct{} // closed when run returned, once started
}

func (f *Fleet) newMember(name string, cfg *rest.Config) (*member, error) {
	base, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: cluster %s: %w", name, err)
	}
	transport := newSwapTransport(transportOf(base), f.opts.MaxResponseBytes)
	hc := &http.Client{Transport: transport, Timeout: base.Timeout}
	disc, err := listwatch.NewDiscovery(cfg, hc, f.opts.Scheme)
	if err != nil {
		return nil, fmt.Errorf("fleet: cluster %s: %w", name, err)
	}
	disc.Serializer = f.serializer // one for every cluster
	m := &member{name: name, hc: hc, transport: transport, discovery: disc, interval: f.opts.ProbeInterval}
	if m.interval > 0 {
		if m.probeDC, err = discovery.NewDiscoveryClientForConfigAndClient(cfg, hc); err != nil {
			return nil, fmt.Errorf("fleet: cluster %s: %w", name, err)
		}
	}
	m.cluster = &Cluster{member: m, name: name, hc: hc, disc: disc, scheme: f.opts.Scheme}
	m.cluster.cfg.Store(cfg)
	if failed := m.follow(f, f.sourcesNow()); len(failed) > 0 {
		m.close()
		return nil, errors.Join(slices.Collect(maps.Values(failed))...)
	}
	return m, nil
}

// transportOf returns hc's transport: http.DefaultTransport where hc has
// none (client-go returns http.DefaultClient for a configuration with no
// TLS, credentials or timeout, as for kubectl proxy's plain HTTP).
func transportOf(hc *http.Client) http.RoundTripper {
	if hc.Transport == nil {
		return http.DefaultTransport
	}
	return hc.Transport
}

// sourcesNow returns a copy of the fleet's sources.
func (f *Fleet) sourcesNow() []source {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sources)
}

// follow brings m's informers in line with sources, a copy of the fleet's
// taken at some point: it builds (and, once m runs, starts) those of the
// sources added since m last followed, and stops those removed. Sources
// are only ever appended, and a removal is for good, so following an older
// copy after a newer one undoes nothing. A source whose build fails gets
// no informer here (its place stays empty) and the others are built; the
// failures are returned by their sources' places, for the For, Owns or
// Watches that added each to report (and roll back) and for Engage to
// refuse the cluster. A build takes m.mu, never f.mu (whose holders may
// take m.mu).
func (m *member) follow(f *Fleet, sources []source) (failed map[int]error) {
	var gone []*sourceRun
	func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.stopped {
			return
		}
		for i, s := range sources {
			switch {
			case i >= len(m.runs) && s.removed:
				m.runs = append(m.runs, nil)
			case i >= len(m.runs):
				r, err := s.build(f, m)
				if err != nil {
					m.runs = append(m.runs, nil)
					if failed == nil {
						failed = map[int]error{}
					}
					failed[i] = fmt.Errorf("fleet: cluster %s: %w", m.name, err)
					continue
				}
				m.runs = append(m.runs, r)
				if m.ctx != nil {
					m.startLocked(r)
				}
			case s.removed && m.runs[i] != nil:
				gone = append(gone, m.runs[i])
				m.runs[i] = nil
			}
		}
	}()
	for _, r := range gone {
		r.stopAndClose()
	}
	return failed
}

// sources returns m's informers, removed sources left out.
func (m *member) sources() []*sourceRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*sourceRun, 0, len(m.runs))
	for _, r := range m.runs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// isStopped reports whether m was closed (its cluster disengaged).
func (m *member) isStopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// start runs m's informers under ctx.
func (m *member) start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.cancel != nil {
		return
	}
	m.ctx, m.cancel = context.WithCancel(ctx)
	for _, r := range m.runs {
		if r != nil {
			m.startLocked(r)
		}
	}
	if m.probeDC != nil {
		m.wg.Go(func() { m.probe(m.ctx, m.probeDC, m.interval) })
	}
}

// startLocked runs r under m's context; m.mu is held.
func (m *member) startLocked(r *sourceRun) {
	ctx, cancel := context.WithCancel(m.ctx)
	r.stop, r.done = cancel, make(chan struct{})
	m.wg.Go(func() {
		defer close(r.done)
		_ = r.run(ctx)
	})
}

// stopAndClose stops r's informer, if it runs, waits for it, and takes its
// handler off the controller.
func (r *sourceRun) stopAndClose() {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
	r.remove()
	r.close()
}

// close stops m's informers, takes their handlers off the controller and
// closes its idle connections where the transport lets it.
func (m *member) close() {
	m.mu.Lock()
	m.stopped = true
	cancel := m.cancel
	runs := m.runs
	m.runs = nil
	reconciles := m.reconciles
	m.reconciles = nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	for _, stop := range reconciles {
		stop(errDisengaged)
	}
	m.wg.Wait()
	for _, r := range runs {
		if r != nil {
			r.stopAndClose() // stopped already: only its handler and informer are let go
		}
	}
	m.hc.CloseIdleConnections()
}
