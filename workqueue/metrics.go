package workqueue

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are one queue's Prometheus series: the metric names, labels and
// buckets controller-runtime registers for its queues, with the queue's name
// as both constant labels "name" and "controller". Counters and histograms
// are updated as work flows; the gauges are computed when the registry is
// scraped, so no goroutine keeps them fresh. A nil *metrics records nothing.
type metrics struct {
	adds      prometheus.Counter
	retries   prometheus.Counter
	queueWait prometheus.Histogram
	work      prometheus.Histogram
	series    *telemetry.Series // all of them, registered by New and unregistered by ShutDown
}

// progress is what the scrape-time gauges read from the queue.
type progress interface {
	depth() int
	// inFlight returns the total and the longest time keys handed out and
	// not yet done have been processed, in seconds.
	inFlight() (total, longest float64)
	// bands returns the bands holding keys, and the time now.
	bands() ([]BandState, time.Time)
}

// durationBuckets are controller-runtime's: 10 ns to 1000 s, twelve
// buckets a factor of 10 apart.
var durationBuckets = prometheus.ExponentialBuckets(1e-8, 10, 12)

// queueLabels are the constant labels of a queue's series. controller-runtime
// labels its queues' series with the controller's name twice, as "name" and
// as "controller"; so does ctrlkit, so that dashboards selecting either work.
func queueLabels(name string) prometheus.Labels {
	return prometheus.Labels{"name": name, "controller": name}
}

func newMetrics(reg prometheus.Registerer, name string, p progress) *metrics {
	s := telemetry.Telemetry{Registerer: reg}.Series(queueLabels(name))
	m := &metrics{
		adds:    s.Counter("workqueue_adds_total", "Total number of adds handled by the work queue."),
		retries: s.Counter("workqueue_retries_total", "Total number of retries handled by the work queue: adds with a delay or rate limited (AddAfter, AddRateLimited; a reconcile's RequeueAfter, a failure's backoff, a read-your-writes hold)."),
		queueWait: s.Histogram("workqueue_queue_duration_seconds",
			"How long in seconds a key waits in the work queue before it is handed out.", durationBuckets),
		work: s.Histogram("workqueue_work_duration_seconds",
			"How long in seconds processing a key from the work queue takes.", durationBuckets),
		series: s,
	}
	s.GaugeFunc("workqueue_depth", "Current number of keys waiting in the work queue.",
		func() float64 { return float64(p.depth()) })
	s.GaugeFunc("workqueue_unfinished_work_seconds",
		"Seconds of work in progress that has not been observed by work_duration yet; a large value means stuck workers.",
		func() float64 { total, _ := p.inFlight(); return total })
	s.GaugeFunc("workqueue_longest_running_processor_seconds",
		"Seconds the longest-running worker has been processing its key.",
		func() float64 { _, longest := p.inFlight(); return longest })
	s.Collector(newBandMetrics(name, p))
	return m
}

// The methods below accept a nil *metrics (metrics off) and then do nothing.

// added counts n keys that became dirty.
func (m *metrics) added(n int) {
	if n > 0 {
		telemetry.Record(m, func() { m.adds.Add(float64(n)) })
	}
}

func (m *metrics) retried() { telemetry.Record(m, func() { m.retries.Inc() }) }

func (m *metrics) handedOut(waited time.Duration) {
	telemetry.Record(m, func() { m.queueWait.Observe(waited.Seconds()) })
}

func (m *metrics) finished(took time.Duration) {
	telemetry.Record(m, func() { m.work.Observe(took.Seconds()) })
}

// maxBandLabels caps the values of the band metrics' "priority" label: the
// first maxBandLabels-1 priorities a scrape sees get their own value, and
// every later one is reported under "other", so a caller that uses many
// priorities cannot grow the series without bound.
const maxBandLabels = 8

// bandMetrics reports, per priority band, workqueue_band_depth (keys
// waiting) and workqueue_band_oldest_seconds (how long the band's oldest
// key has waited), computed when scraped. A band that once had its own
// label keeps reporting it, as 0 when empty.
type bandMetrics struct {
	p      progress
	depth  *prometheus.Desc
	oldest *prometheus.Desc

	mu     sync.Mutex // guards labels and other
	labels []int      // priorities with their own label value, in the order first seen
	other  bool       // whether "other" has been reported
}

func newBandMetrics(name string, p progress) *bandMetrics {
	labels := queueLabels(name)
	return &bandMetrics{
		p: p,
		depth: prometheus.NewDesc("workqueue_band_depth",
			"Current number of keys waiting in the work queue at one priority (label \"other\": the priorities beyond the label cap).",
			[]string{"priority"}, labels),
		oldest: prometheus.NewDesc("workqueue_band_oldest_seconds",
			"How long in seconds the oldest key waiting at one priority has waited.",
			[]string{"priority"}, labels),
	}
}

// Describe implements prometheus.Collector.
func (b *bandMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.depth
	ch <- b.oldest
}

// Collect implements prometheus.Collector.
func (b *bandMetrics) Collect(ch chan<- prometheus.Metric) {
	bands, now := b.p.bands()
	type row struct {
		depth  int
		oldest float64
	}
	rows := map[string]row{}
	b.mu.Lock()
	for _, p := range b.labels {
		rows[strconv.Itoa(p)] = row{}
	}
	if b.other {
		rows["other"] = row{}
	}
	for _, s := range bands {
		label := b.labelLocked(s.Priority)
		r := rows[label]
		r.depth += s.Depth
		if !s.Oldest.IsZero() {
			r.oldest = max(r.oldest, now.Sub(s.Oldest).Seconds())
		}
		rows[label] = r
	}
	b.mu.Unlock()
	for label, r := range rows {
		ch <- prometheus.MustNewConstMetric(b.depth, prometheus.GaugeValue, float64(r.depth), label)
		ch <- prometheus.MustNewConstMetric(b.oldest, prometheus.GaugeValue, r.oldest, label)
	}
}

// labelLocked returns the label value of priority p, giving it one of its
// own while fewer than maxBandLabels-1 priorities have one.
func (b *bandMetrics) labelLocked(p int) string {
	if slices.Contains(b.labels, p) {
		return strconv.Itoa(p)
	}
	if len(b.labels) < maxBandLabels-1 {
		b.labels = append(b.labels, p)
		return strconv.Itoa(p)
	}
	b.other = true
	return "other"
}
