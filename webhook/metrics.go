package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are the server's series, by webhook path, under
// controller-runtime's names where it has them. A nil *metrics records
// nothing.
type metrics struct {
	requests   *prometheus.CounterVec // by webhook and HTTP code
	latency    *prometheus.HistogramVec
	inflight   *prometheus.GaugeVec
	rejections *prometheus.CounterVec
	panics     *prometheus.CounterVec
	certErrors prometheus.Counter
	certLoads  prometheus.Counter
}

func newMetrics(tel telemetry.Telemetry) (*metrics, error) {
	if tel.Registerer == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_webhook_requests_total",
			Help: "Admission and conversion requests served, by webhook path and HTTP status code."}, []string{"webhook", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "controller_runtime_webhook_latency_seconds",
			Help:    "Time to answer a webhook request, by webhook path.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"webhook"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "controller_runtime_webhook_requests_in_flight",
			Help: "Webhook requests being answered, by webhook path."}, []string{"webhook"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctrlkit_webhook_rejections_total",
			Help: "Admission requests denied (a validator's or defaulter's error), by webhook path."}, []string{"webhook"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctrlkit_webhook_panics_total",
			Help: "Webhook handlers that panicked (answered 500), by webhook path."}, []string{"webhook"}),
		certLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_webhook_certificate_loads_total",
			Help: "Serving certificates read from the certificate directory (the first and every rotation)."}),
		certErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_webhook_certificate_errors_total",
			Help: "Failed reads of the serving certificate (the last good one is served meanwhile)."}),
	}
	if err := tel.Register(m.requests, m.latency, m.inflight, m.rejections, m.panics, m.certLoads, m.certErrors); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) inFlight(path string, d float64) {
	if m != nil {
		m.inflight.WithLabelValues(path).Add(d)
	}
}

func (m *metrics) served(path, code string, rejected bool, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(path, code).Inc()
	m.latency.WithLabelValues(path).Observe(took.Seconds())
	if rejected {
		m.rejections.WithLabelValues(path).Inc()
	}
}

func (m *metrics) panicked(path string) {
	if m != nil {
		m.panics.WithLabelValues(path).Inc()
	}
}

func (m *metrics) certLoaded(err error) {
	switch {
	case m == nil:
	case err != nil:
		m.certErrors.Inc()
	default:
		m.certLoads.Inc()
	}
}
