package ledger

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are the ledger's series; a nil *metrics records nothing.
type metrics struct {
	writes   prometheus.Counter
	holds    prometheus.Histogram
	timeouts prometheus.Counter
}

func newMetrics(tel telemetry.Telemetry) (*metrics, error) {
	return telemetry.Build(tel, nil, func(s *telemetry.Series) *metrics {
		return &metrics{
			writes: s.Counter("ctrlkit_ledger_writes_waited_total", "Writes recorded that the caches had not applied yet."),
			holds: s.Histogram("ctrlkit_ledger_wait_seconds",
				"Time from an owner's first pending write until the caches applied all of them.",
				prometheus.ExponentialBuckets(0.001, 2, 14)),
			timeouts: s.Counter("ctrlkit_ledger_timeouts_total", "Keys let through at the bound before the caches applied their writes."),
		}
	})
}

func (m *metrics) recorded() { telemetry.Record(m, func() { m.writes.Inc() }) }

func (m *metrics) held(d time.Duration) { telemetry.Record(m, func() { m.holds.Observe(d.Seconds()) }) }

func (m *metrics) timedOut() { telemetry.Record(m, func() { m.timeouts.Inc() }) }
