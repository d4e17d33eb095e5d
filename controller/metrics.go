package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Result label values of controller_runtime_reconcile_total, as
// controller-runtime names them. ctrlkit has no Requeue flag, so "requeue"
// stays at 0; it is reported so that queries naming it find a series.
const (
	resultSuccess      = "success"
	resultError        = "error"
	resultRequeue      = "requeue"
	resultRequeueAfter = "requeue_after"
)

// Reasons of ctrlkit_controller_dropped_keys_total.
const (
	dropMaxRetries = "max_retries"
	dropNotOwned   = "not_owned"
)

// reconcileBuckets are controller-runtime's buckets for the reconcile
// time: 5ms to 60s, finer below a second, so its dashboards' quantiles
// read the same.
var reconcileBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1,
	1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
}

// metrics are one controller's Prometheus series, each with the constant
// label controller=<name>. The reconcile series carry controller-runtime's
// names, labels and buckets (see the package doc); what only ctrlkit does
// (the read-your-writes gate, keys dropped unreconciled) is under ctrlkit_.
// A nil *metrics records nothing.
type metrics struct {
	reconciles *prometheus.CounterVec // by result
	// The series of reconciles counted at every reconcile, resolved once
	// (a vector's lookup hashes the label): results success, requeue_after
	// and error.
	success, requeueAfter, failure prometheus.Counter
	errs                           prometheus.Counter
	terminal                       prometheus.Counter
	panics                         prometheus.Counter
	timeouts                       prometheus.Counter
	latency                        prometheus.Histogram
	busy                           prometheus.Gauge
	workers                        prometheus.Gauge
	holds                          prometheus.Counter
	self                           prometheus.Counter
	dropped                        *prometheus.CounterVec // by reason
	series                         *telemetry.Series      // for Close
}

func newMetrics(tel telemetry.Telemetry, name string, workers int) (*metrics, error) {
	return telemetry.Build(tel, prometheus.Labels{"controller": name}, func(s *telemetry.Series) *metrics {
		m := &metrics{
			reconciles: s.CounterVec("controller_runtime_reconcile_total",
				"Reconciles by how they ended: success, requeue_after (succeeded and asked to be run again later), error (any error, terminal ones included, and panics); requeue is always 0 in ctrlkit.",
				"result"),
			errs: s.Counter("controller_runtime_reconcile_errors_total",
				"Reconciles that returned an error or panicked, terminal errors included."),
			terminal: s.Counter("controller_runtime_terminal_reconcile_errors_total",
				"Reconciles that returned a terminal error (controller.Terminal): not retried."),
			panics: s.Counter("controller_runtime_reconcile_panics_total", "Reconciles that panicked (recovered, counted as errors too)."),
			timeouts: s.Counter("controller_runtime_reconcile_timeouts_total",
				"Reconciles whose context ran out of Options.ReconcileTimeout."),
			latency: s.Histogram("controller_runtime_reconcile_time_seconds", "How long reconciles took, in seconds.", reconcileBuckets),
			busy:    s.Gauge("controller_runtime_active_workers", "Workers reconciling a key now."),
			workers: s.Gauge("controller_runtime_max_concurrent_reconciles", "Workers of the controller (Options.Workers): the most keys reconciled at once."),
			holds:   s.Counter("ctrlkit_controller_gate_holds_total", "Times a key was held back by the gate (read-your-writes)."),
			self: s.Counter("ctrlkit_controller_self_triggered_total",
				"Reconciles queued by an event of the controller's own write (counted with a tracer only: see package tracing); a steady rise is a hot loop."),
			dropped: s.CounterVec("ctrlkit_controller_dropped_keys_total",
				"Keys given up on, by reason: max_retries (failed Options.MaxRetries times in a row; the reconciles count as errors too), not_owned (not reconciled here: another replica owns them, see sharding).",
				"reason"),
		}
		m.success, m.requeueAfter = m.reconciles.WithLabelValues(resultSuccess), m.reconciles.WithLabelValues(resultRequeueAfter)
		m.failure = m.reconciles.WithLabelValues(resultError)
		m.reconciles.WithLabelValues(resultRequeue) // always 0, reported (see resultRequeue)
		for _, r := range []string{dropMaxRetries, dropNotOwned} {
			m.dropped.WithLabelValues(r)
		}
		m.workers.Set(float64(workers))
		m.series = s
		return m
	})
}

// succeeded counts a reconcile that returned no error; later reports
// whether it asked to be run again after a delay.
func (m *metrics) succeeded(later bool) {
	if m == nil {
		return
	}
	if later {
		m.requeueAfter.Inc()
	} else {
		m.success.Inc()
	}
}

// failed counts a reconcile that returned an error (or panicked).
func (m *metrics) failed(terminal bool) {
	if m == nil {
		return
	}
	m.failure.Inc()
	m.errs.Inc()
	if terminal {
		m.terminal.Inc()
	}
}

// drop counts a key given up on for reason.
func (m *metrics) drop(reason string) {
	telemetry.Record(m, func() { m.dropped.WithLabelValues(reason).Inc() })
}

func (m *metrics) gated() { telemetry.Record(m, func() { m.holds.Inc() }) }

func (m *metrics) panicked() { telemetry.Record(m, func() { m.panics.Inc() }) }

func (m *metrics) timedOut() { telemetry.Record(m, func() { m.timeouts.Inc() }) }

func (m *metrics) workerBusy(d float64) { telemetry.Record(m, func() { m.busy.Add(d) }) }

// duration observes a reconcile's time, with the trace id of its span as
// the exemplar when it was sampled ("" for none).
func (m *metrics) duration(d time.Duration, traceID string) {
	if m == nil {
		return
	}
	if traceID != "" {
		if eo, ok := m.latency.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
			return
		}
	}
	m.latency.Observe(d.Seconds())
}

// selfTriggered counts a reconcile queued by the controller's own write.
func (m *metrics) selfTriggered() { telemetry.Record(m, func() { m.self.Inc() }) }
