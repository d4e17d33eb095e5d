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
	series         *telemetry.Series // for Close
}

func newMetrics(tel telemetry.Telemetry, name string) (*metrics, error) {
	return telemetry.Build(tel, prometheus.Labels{"name": name}, func(s *telemetry.Series) *metrics {
		m := &metrics{
			lists:   s.CounterVec("ctrlkit_reflector_lists_total", "List requests (pages), by result.", "result"),
			watches: s.CounterVec("ctrlkit_reflector_watches_total", "Watch requests, by result.", "result"),
			relists: s.Counter("ctrlkit_reflector_relists_total", "Full resynchronisations after the first sync."),
			events:  s.CounterVec("ctrlkit_reflector_events_total", "Watch events received, by type.", "type"),
			skipped: s.CounterVec("ctrlkit_reflector_skipped_objects_total", "Objects skipped as unusable, by reason.", "reason"),
			failures: s.CounterVec("ctrlkit_reflector_failures_total",
				"Failed lists and watches, by op and HTTP status code (0: none, e.g. connection refused).", "op", "code"),
			sinkErrors: s.Counter("ctrlkit_reflector_sink_errors_total", "Errors returned by the sink."),
			lastRV:     s.Gauge("ctrlkit_reflector_last_synced_resource_version", "Last resource version synced, when numeric."),
			listDuration: s.Histogram("ctrlkit_reflector_list_duration_seconds", "Duration of list requests (pages).",
				prometheus.ExponentialBuckets(0.005, 2, 14)),
		}
		m.series = s
		m.byType = map[string]prometheus.Counter{}
		for _, t := range []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"} {
			m.byType[t] = m.events.WithLabelValues(t)
		}
		return m
	})
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
	telemetry.Record(m, func() { m.watches.WithLabelValues(result(err)).Inc() })
}

func (m *metrics) relist() { telemetry.Record(m, func() { m.relists.Inc() }) }

func (m *metrics) event(typ string) {
	if m == nil {
		return
	}
	if c, ok := m.byType[typ]; ok {
		c.Inc()
		return
	}
	m.events.WithLabelValues("unknown").Inc() // a ListerWatcher's own type: one series, whatever it sends
}

func (m *metrics) skip(reason string, n int) {
	telemetry.Record(m, func() { m.skipped.WithLabelValues(reason).Add(float64(n)) })
}

func (m *metrics) failure(op string, code int32) {
	telemetry.Record(m, func() { m.failures.WithLabelValues(op, strconv.Itoa(int(code))).Inc() })
}

func (m *metrics) sinkError() { telemetry.Record(m, func() { m.sinkErrors.Inc() }) }

func (m *metrics) setRV(rv string) {
	if m == nil {
		return
	}
	if v, err := strconv.ParseUint(rv, 10, 64); err == nil {
		m.lastRV.Set(float64(v))
	}
}
