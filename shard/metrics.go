package shard

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

type sharderMetrics struct {
	owned     prometheus.Gauge
	handoffs  *prometheus.CounterVec
	lost      prometheus.Counter
	conflicts prometheus.Counter
	notOwned  prometheus.Counter
}

func newSharderMetrics(tel telemetry.Telemetry, ring string) (*sharderMetrics, error) {
	l := prometheus.Labels{"ring": ring}
	m := &sharderMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ctrlkit_shard_owned_virtual_shards", ConstLabels: l,
			Help: "Virtual shards this replica reconciles."}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctrlkit_shard_handoffs_total", ConstLabels: l,
			Help: "Virtual shards acquired, released, taken over from an expired holder, or lost to another holder (which should not happen)."}, []string{"kind"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_membership_lapses_total", ConstLabels: l,
			Help: "Times this replica could not renew its membership in time and stopped every shard."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_table_conflicts_total", ConstLabels: l,
			Help: "Writes of the ring's table that another replica's write beat (retried)."}),
		notOwned: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_keys_not_owned_total", ConstLabels: l,
			Help: "Keys that reached a worker while their shard was not open here, dropped (their owner reconciles them)."}),
	}
	if err := tel.Register(m.owned, m.handoffs, m.lost, m.conflicts, m.notOwned); err != nil {
		return nil, fmt.Errorf("shard: metrics: %w", err)
	}
	return m, nil
}
