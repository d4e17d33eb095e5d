package reflector

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are one reflector's Prometheus series, labelled with its name. A
// nil *metrics records nothing.
type metrics struct {
	lists, watches *prometheus.CounterVec // by result: ok or error
	relists        prometheus.Counter
	events         *prometheus.CounterVec        // by type: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	byType         map[string]prometheus.Counter // the events counters, resolved once: they count every event
	skipped        *prometheus.CounterVec        // by reason
	failures       *prometheus.CounterVec        // by op and HTTP code ("0": none)
	sinkErrors     prometheus.Counter
	lastRV         prometheus.Gauge
	listDuration   prometheus.Histogram
}

func newMetrics(tel telemetry.Telemetry, name string) (*metrics, error) {
	if tel.Registerer == nil {
		return nil, nil
	}
	l := prometheus.Labels{"name": name}
	counter := func(n, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ctrlkit", Subsystem: "reflector", Name: n, Help: help, ConstLabels: l}, labels)
	}
	m := &metrics{
		lists:   counter("lists_total", "List requests (pages), by result.", "result"),
		watches: counter("watches_total", "Watch requests, by result.", "result"),
		relists: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "reflector",
			Name: "relists_total", Help: "Full resynchronisations after the first sync.", ConstLabels: l}),
		events:  counter("events_total", "Watch events received, by type.", "type"),
		skipped: counter("skipped_objects_total", "Objects skipped as unusable, by reason.", "reason"),
		failures: counter("failures_total",
			"Failed lists and watches, by op and HTTP status code (0: none, e.g. connection refused).", "op", "code"),
		sinkErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "reflector",
			Name: "sink_errors_total", Help: "Errors returned by the sink.", ConstLabels: l}),
		lastRV: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ctrlkit", Subsystem: "reflector",
			Name: "last_synced_resource_version", Help: "Last resource version synced, when numeric.", ConstLabels: l}),
		listDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ctrlkit", Subsystem: "reflector",
			Name: "list_duration_seconds", Help: "Duration of list requests (pages).", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	m.byType = map[string]prometheus.Counter{}
	for _, t := range []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"} {
		m.byType[t] = m.events.WithLabelValues(t)
	}
	if err := tel.Register(m.lists, m.watches, m.relists, m.events, m.skipped, m.failures, m.sinkErrors, m.lastRV, m.listDuration); err != nil {
		return nil, err
	}
	return m, nil
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func (m *metrics) list(d time.Duration, err error) {
	if m != nil {
		m.lists.WithLabelValues(result(err)).Inc()
		m.listDuration.Observe(d.Seconds())
	}
}

func (m *metrics) watch(err error) {
	if m != nil {
		m.watches.WithLabelValues(result(err)).Inc()
	}
}

func (m *metrics) relist() {
	if m != nil {
		m.relists.Inc()
	}
}

func (m *metrics) event(typ string) {
	if m == nil {
		return
	}
	if c, ok := m.byType[typ]; ok {
		c.Inc()
		return
	}
	m.events.WithLabelValues(typ).Inc() // an unknown type: rare by definition
}

func (m *metrics) skip(reason string, n int) {
	if m != nil {
		m.skipped.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *metrics) failure(op string, code int32) {
	if m != nil {
		m.failures.WithLabelValues(op, strconv.Itoa(int(code))).Inc()
	}
}

func (m *metrics) sinkError() {
	if m != nil {
		m.sinkErrors.Inc()
	}
}

func (m *metrics) setRV(rv string) {
	if m == nil {
		return
	}
	if v, err := strconv.ParseUint(rv, 10, 64); err == nil {
		m.lastRV.Set(float64(v))
	}
}
