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
	return telemetry.Build(tel, nil, func(s *telemetry.Series) *metrics {
		return &metrics{
			requests: s.CounterVec("controller_runtime_webhook_requests_total",
				"Admission and conversion requests served, by webhook path and HTTP status code.", "webhook", "code"),
			latency: s.HistogramVec("controller_runtime_webhook_latency_seconds", "Time to answer a webhook request, by webhook path.",
				[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "webhook"),
			inflight: s.GaugeVec("controller_runtime_webhook_requests_in_flight", "Webhook requests being answered, by webhook path.",
				"webhook"),
			rejections: s.CounterVec("ctrlkit_webhook_rejections_total",
				"Admission requests denied (a validator's or defaulter's error), by webhook path.", "webhook"),
			panics: s.CounterVec("ctrlkit_webhook_panics_total", "Webhook handlers that panicked (answered 500), by webhook path.",
				"webhook"),
			certLoads: s.Counter("ctrlkit_webhook_certificate_loads_total",
				"Serving certificates read from the certificate directory (the first and every rotation)."),
			certErrors: s.Counter("ctrlkit_webhook_certificate_errors_total",
				"Failed reads of the serving certificate (the last good one is served meanwhile)."),
		}
	})
}

func (m *metrics) inFlight(path string, d float64) {
	telemetry.Record(m, func() { m.inflight.WithLabelValues(path).Add(d) })
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
	telemetry.Record(m, func() { m.panics.WithLabelValues(path).Inc() })
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
