package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Series builds a component's Prometheus collectors, all with the same
// constant labels (e.g. the component's name), and registers them together.
// Each builder method creates a collector, remembers it and returns it;
// Register then registers every one remembered, or none. Metric names are
// passed in full (e.g. "ctrlkit_reflector_relists_total"), so that each
// name can be found in the code as it is scraped.
//
// A Series is not safe for concurrent use; a component builds it once, in
// its constructor.
type Series struct {
	tel    Telemetry
	labels prometheus.Labels
	cs     []prometheus.Collector
}

// Series returns an empty Series whose collectors carry the constant labels
// and are registered with t's Registerer.
func (t Telemetry) Series(labels prometheus.Labels) *Series {
	return &Series{tel: t, labels: labels}
}

// Build makes a component's metrics, M, with build and registers the
// collectors build made with the Series it is given (all with the constant
// labels). Without a Registerer it returns nil and calls nothing: a
// component's nil metrics record nothing, at no cost.
func Build[M any](t Telemetry, labels prometheus.Labels, build func(*Series) *M) (*M, error) {
	if t.Registerer == nil {
		return nil, nil
	}
	s := t.Series(labels)
	m := build(s)
	if err := s.Register(); err != nil {
		return nil, err
	}
	return m, nil
}

// add remembers c and returns it.
func add[C prometheus.Collector](s *Series, c C) C {
	s.cs = append(s.cs, c)
	return c
}

// Counter returns a new counter.
func (s *Series) Counter(name, help string) prometheus.Counter {
	return add(s, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: s.labels}))
}

// CounterVec returns a new counter partitioned by the variable labels.
func (s *Series) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return add(s, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: s.labels}, labels))
}

// Gauge returns a new gauge.
func (s *Series) Gauge(name, help string) prometheus.Gauge {
	return add(s, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: s.labels}))
}

// GaugeVec returns a new gauge partitioned by the variable labels.
func (s *Series) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return add(s, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: s.labels}, labels))
}

// GaugeFunc returns a new gauge whose value is f's result, called when the
// registry is scraped.
func (s *Series) GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return add(s, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: s.labels}, f))
}

// Histogram returns a new histogram with the buckets' upper bounds.
func (s *Series) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return add(s, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: name, Help: help, ConstLabels: s.labels, Buckets: buckets}))
}

// HistogramVec returns a new histogram with the buckets' upper bounds,
// partitioned by the variable labels.
func (s *Series) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return add(s, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, ConstLabels: s.labels, Buckets: buckets}, labels))
}

// Collector remembers a collector built elsewhere (one computing its
// metrics when scraped, say), to be registered with the others. Its
// constant labels are its own.
func (s *Series) Collector(c prometheus.Collector) {
	add(s, c)
}

// Register registers every collector built so far with Telemetry.Register:
// all of them, or none and an error. Without a Registerer it does nothing.
func (s *Series) Register() error {
	return s.tel.Register(s.cs...)
}

// Unregister unregisters every collector built so far: a component that
// stops before its process does takes its series away with it.
func (s *Series) Unregister() {
	if s.tel.Registerer == nil {
		return
	}
	for _, c := range s.cs {
		s.tel.Registerer.Unregister(c)
	}
}

// Record calls record unless m, a component's metrics, is nil: metrics
// are off and record nothing. It lets a component's recording methods read
// as one line each, e.g.
//
//	func (m *metrics) relist() { telemetry.Record(m, func() { m.relists.Inc() }) }
//
// record runs only when m is not nil, so it may read m's fields.
func Record[M any](m *M, record func()) {
	if m != nil {
		record()
	}
}
