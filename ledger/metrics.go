package ledger

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ledger's series; a nil *metrics records nothing.
type metrics struct {
	writes   prometheus.Counter
	holds    prometheus.Histogram
	timeouts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "ledger",
			Name: "writes_waited_total", Help: "Writes recorded that the caches had not applied yet."}),
		holds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ctrlkit", Subsystem: "ledger",
			Name: "wait_seconds", Help: "Time from an owner's first pending write until the caches applied all of them.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ctrlkit", Subsystem: "ledger",
			Name: "timeouts_total", Help: "Keys let through at the bound before the caches applied their writes."}),
	}
	for _, c := range []prometheus.Collector{m.writes, m.holds, m.timeouts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) recorded() {
	if m != nil {
		m.writes.Inc()
	}
}

func (m *metrics) held(d time.Duration) {
	if m != nil {
		m.holds.Observe(d.Seconds())
	}
}

func (m *metrics) timedOut() {
	if m != nil {
		m.timeouts.Inc()
	}
}
