package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are one controller's Prometheus series, labelled with its name.
// A nil *metrics records nothing.
type metrics struct {
	reconciles *prometheus.CounterVec // by result
	panics     prometheus.Counter
	busy       prometheus.Gauge
	holds      prometheus.Counter
	latency    prometheus.Histogram
}

func newMetrics(tel telemetry.Telemetry, name string) (*metrics, error) {
	if tel.Registerer == nil {
		return nil, nil
	}
	l := prometheus.Labels{"name": name}
	m := &metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "controller",
			Name: "reconciles_total", ConstLabels: l,
			Help: "Reconciles by result: success, requeue_after, error, terminal_error, dropped; not_owned counts keys dropped unreconciled because another replica owns them (sharding)."}, []string{"result"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "controller",
			Name: "reconcile_panics_total", Help: "Reconciles that panicked (recovered).", ConstLabels: l}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "controller",
			Name: "gate_holds_total", Help: "Times a key was held back by the gate (read-your-writes).", ConstLabels: l}),
		busy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ctrlkit", Subsystem: "controller",
			Name: "active_workers", Help: "Workers reconciling a key now.", ConstLabels: l}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ctrlkit", Subsystem: "controller",
			Name: "reconcile_duration_seconds", Help: "Duration of reconciles.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	if err := tel.Register(m.reconciles, m.panics, m.busy, m.latency, m.holds); err != nil {
		return nil, err
	}
	return m, nil
}

// notOwned counts a key dropped because another replica owns it.
func (m *metrics) notOwned() { m.result("not_owned") }

func (m *metrics) result(r string) {
	if m != nil {
		m.reconciles.WithLabelValues(r).Inc()
	}
}

func (m *metrics) gated() {
	if m != nil {
		m.holds.Inc()
	}
}

func (m *metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}

func (m *metrics) workerBusy(d float64) {
	if m != nil {
		m.busy.Add(d)
	}
}

func (m *metrics) duration(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}
