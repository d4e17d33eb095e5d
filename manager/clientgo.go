package manager

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/klog/v2"
)

// client-go reports its REST requests to hooks set once per process
// (tools/metrics.Register) and logs through klog, also configured once per
// process. This file connects both to the managers, process-wide.

// restClientBuckets are the request latency buckets of Kubernetes' own
// components and controller-runtime: 5ms to 60s.
var restClientBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// restClient holds the REST client series of the process. They are
// registered in every manager's registry, so each /metrics shows the
// requests of the whole process (client-go does not say which client made
// a request).
var restClient struct {
	once        sync.Once
	collectors  []prometheus.Collector // nil when another library holds client-go's hooks
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	rateLimiter *prometheus.HistogramVec
}

// client-go reads its hooks without synchronisation, so they are set when
// the package is initialised, before any goroutine can make a request.
func init() { restClientCollectors() }

// restClientCollectors sets client-go's hooks, on the first call, and
// returns the series they feed; nil if another library set the hooks
// first (client-go keeps the first), as controller-runtime's metrics
// package does when it is imported.
func restClientCollectors() []prometheus.Collector {
	restClient.once.Do(func() {
		requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "HTTP requests made by client-go in this process, by status code, method and host."},
			[]string{"code", "method", "host"})
		latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help:    "How long client-go's HTTP requests took, in seconds, by verb and host.",
			Buckets: restClientBuckets}, []string{"verb", "host"})
		limiter := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
			Help:    "How long client-go's requests waited for the client-side rate limiter (rest.Config QPS and Burst), in seconds, by verb and host.",
			Buckets: restClientBuckets}, []string{"verb", "host"})
		result := resultHook{requests}
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:      result,
			RequestLatency:     latencyHook{latency},
			RateLimiterLatency: latencyHook{limiter},
		})
		if clientmetrics.RequestResult != clientmetrics.ResultMetric(result) {
			return // someone else's hooks: ours would stay at 0
		}
		restClient.requests, restClient.latency, restClient.rateLimiter = requests, latency, limiter
		restClient.collectors = []prometheus.Collector{requests, latency, limiter}
	})
	return restClient.collectors
}

// registerRESTClientMetrics registers the process's REST client series in
// reg. A registry already holding them (shared by two managers) is fine.
func registerRESTClientMetrics(reg prometheus.Registerer, log *slog.Logger) error {
	cs := restClientCollectors()
	if cs == nil {
		log.Warn("manager: client-go's REST client metrics are already registered by another library; rest_client_* are not on this manager's registry")
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) && already.ExistingCollector == c {
				continue
			}
			return err
		}
	}
	return nil
}

type resultHook struct{ v *prometheus.CounterVec }

func (h resultHook) Increment(_ context.Context, code, method, host string) {
	h.v.WithLabelValues(code, method, restHosts.label(host)).Inc()
}

type latencyHook struct{ v *prometheus.HistogramVec }

func (h latencyHook) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	h.v.WithLabelValues(verb, restHosts.label(u.Host)).Observe(latency.Seconds())
}

// maxRESTHosts bounds the host label of the rest_client_* series: a
// process talks to a few API servers, but a fleet's providers take the
// servers from what others write (a kubeconfig Secret changed again and
// again would add a set of series per address, kept for the process's
// life). Hosts past the bound are counted under restHostOther.
const maxRESTHosts = 64

// restHostOther is the host label of requests to the hosts past
// maxRESTHosts.
const restHostOther = "other"

// restHosts holds the hosts that have a label of their own.
var restHosts hostLabels

type hostLabels struct {
	mu    sync.Mutex
	known map[string]bool
}

// label returns host, or restHostOther once maxRESTHosts others have a
// label.
func (h *hostLabels) label(host string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.known[host]:
		return host
	case len(h.known) >= maxRESTHosts:
		return restHostOther
	case h.known == nil:
		h.known = map[string]bool{}
	}
	h.known[host] = true
	return host
}

// klogRoute sends klog's output (client-go's leader election, API
// deprecation warnings, ...) to the logger of the most recently started
// manager still running; with none running, to slog.Default(). klog is
// pointed at it once, by the first New without Options.KeepKlogOutput:
// klog's logger cannot be changed safely while others log.
var klogRoute struct {
	once sync.Once
	// mu guards live. A record is handled under the read lock, and a
	// manager leaves under the write lock, so no record reaches a
	// manager's logger after its Run returned.
	mu   sync.RWMutex
	live []*slog.Logger // the running managers' loggers, in start order
}

// routeKlog points klog at the route, once per process.
func routeKlog() {
	klogRoute.once.Do(func() { klog.SetSlogLogger(slog.New(&routeHandler{})) })
}

// joinKlogRoute makes log receive klog's output until leave is called.
func joinKlogRoute(log *slog.Logger) (leave func()) {
	klogRoute.mu.Lock()
	defer klogRoute.mu.Unlock()
	klogRoute.live = append(klogRoute.live, log)
	return func() {
		klogRoute.mu.Lock()
		defer klogRoute.mu.Unlock()
		if i := slices.Index(klogRoute.live, log); i >= 0 {
			klogRoute.live = slices.Delete(klogRoute.live, i, i+1)
		}
	}
}

// routeHandler is a slog.Handler handing each record to the current
// target's handler, with the attributes and groups added on the way.
type routeHandler struct {
	with []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

// target returns the handler records go to; the caller holds the read lock.
func (h *routeHandler) target() slog.Handler {
	t := slog.Default().Handler()
	if n := len(klogRoute.live); n > 0 {
		t = klogRoute.live[n-1].Handler()
	}
	for _, w := range h.with {
		t = w(t)
	}
	return t
}

func (h *routeHandler) Enabled(ctx context.Context, level slog.Level) bool {
	klogRoute.mu.RLock()
	defer klogRoute.mu.RUnlock()
	return h.target().Enabled(ctx, level)
}

func (h *routeHandler) Handle(ctx context.Context, r slog.Record) error {
	klogRoute.mu.RLock()
	defer klogRoute.mu.RUnlock()
	t := h.target()
	if !t.Enabled(ctx, r.Level) {
		return nil
	}
	return t.Handle(ctx, r)
}

func (h *routeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &routeHandler{with: append(slices.Clip(h.with), func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })}
}

func (h *routeHandler) WithGroup(name string) slog.Handler {
	return &routeHandler{with: append(slices.Clip(h.with), func(t slog.Handler) slog.Handler { return t.WithGroup(name) })}
}
