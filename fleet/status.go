package fleet

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Synced reports whether every source's informer in the cluster has listed
// its objects once (since it was engaged); false once it is disengaged.
func (c *Cluster) Synced() bool {
	if c.member.isStopped() {
		return false
	}
	for _, r := range c.member.sources() {
		if !r.synced() {
			return false
		}
	}
	return true
}

// Err returns the cluster's trouble, nil while it is well: the last error
// of a source's informer listing or watching it (a server down,
// unreachable or refusing the credentials), until a list or watch
// succeeds again, and a probe of its server that got no answer (see
// Options.ProbeInterval), until one is answered. A cluster in trouble affects no other: its informers
// retry with backoff, its keys fail and are retried in their own flow of
// the queue, and the others' reconciles go on.
func (c *Cluster) Err() error {
	errs := []error{c.member.health.err()}
	for _, r := range c.member.sources() {
		if err := r.lastErr(); err != nil {
			errs = append(errs, err) // it names the informer, hence the cluster and kind
		}
	}
	return errors.Join(errs...)
}

// ClusterStatus is one engaged cluster's health (see Cluster.Err).
type ClusterStatus struct {
	Name   string
	Synced bool
	Err    error
}

// Status returns the health of every cluster engaged on this replica,
// sorted by name. The
// fleet's own readiness should not depend on it: one cluster down is that
// cluster's trouble, not the process's.
func (f *Fleet) Status() []ClusterStatus {
	names := f.Here()
	out := make([]ClusterStatus, 0, len(names))
	for _, name := range names {
		if c, ok := f.Cluster(name); ok {
			out = append(out, ClusterStatus{Name: name, Synced: c.Synced(), Err: c.Err()})
		}
	}
	return out
}

// metrics are the fleet's series, with the constant label fleet=<the
// controller's name>; the per-cluster ones exist while the cluster is
// engaged (so their number is bounded by the fleet's size). A nil *metrics
// records nothing.
type metrics struct {
	reconciles *prometheus.CounterVec // by cluster and result
	series     *telemetry.Series
}

func newMetrics(f *Fleet) (*metrics, error) {
	return telemetry.Build(f.opts.Controller.Telemetry, prometheus.Labels{"fleet": f.ctrl.Name()}, func(s *telemetry.Series) *metrics {
		m := &metrics{
			reconciles: s.CounterVec("ctrlkit_fleet_reconciles_total",
				"Reconciles by cluster and result (success or error, panics included), while the cluster is engaged.", "cluster", "result"),
			series: s,
		}
		s.Collector(&clusterCollector{f: f,
			engaged: prometheus.NewDesc("ctrlkit_fleet_clusters", "Clusters engaged in the fleet.", nil, prometheus.Labels{"fleet": f.ctrl.Name()}),
			refused: prometheus.NewDesc("ctrlkit_fleet_clusters_refused",
				"Clusters a provider offered that could not be engaged (see Fleet.Refused).", nil, prometheus.Labels{"fleet": f.ctrl.Name()}),
			synced: prometheus.NewDesc("ctrlkit_fleet_cluster_synced", "1 once every source's informer in the cluster has listed its objects.",
				[]string{"cluster"}, prometheus.Labels{"fleet": f.ctrl.Name()}),
			up: prometheus.NewDesc("ctrlkit_fleet_cluster_up", "1 while the cluster's informers list and watch without error (see Cluster.Err).",
				[]string{"cluster"}, prometheus.Labels{"fleet": f.ctrl.Name()}),
		})
		return m
	})
}

// errPanicked stands for the error of a reconcile that panicked.
var errPanicked = errors.New("fleet: the reconcile panicked")

// reconciled counts a reconcile of cluster.
func (m *metrics) reconciled(cluster string, err error) {
	telemetry.Record(m, func() {
		result := "success"
		if err != nil {
			result = "error"
		}
		m.reconciles.WithLabelValues(cluster, result).Inc()
	})
}

// disengaged drops the series of cluster.
func (m *metrics) disengaged(cluster string) {
	telemetry.Record(m, func() { m.reconciles.DeletePartialMatch(prometheus.Labels{"cluster": cluster}) })
}

// clusterCollector reports the engaged clusters' health when scraped.
type clusterCollector struct {
	f                            *Fleet
	engaged, refused, synced, up *prometheus.Desc
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.engaged
	ch <- c.refused
	ch <- c.synced
	ch <- c.up
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.f.Status()
	ch <- prometheus.MustNewConstMetric(c.engaged, prometheus.GaugeValue, float64(len(st)))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(len(c.f.Refused())))
	for _, s := range st {
		ch <- prometheus.MustNewConstMetric(c.synced, prometheus.GaugeValue, one(s.Synced), s.Name)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, one(s.Err == nil), s.Name)
	}
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
