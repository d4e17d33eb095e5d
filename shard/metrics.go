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
	s := tel.Series(prometheus.Labels{"ring": ring})
	m := &sharderMetrics{
		owned: s.Gauge("ctrlkit_shard_owned_virtual_shards", "Virtual shards this replica reconciles."),
		handoffs: s.CounterVec("ctrlkit_shard_handoffs_total",
			"Virtual shards acquired, released, taken over from an expired holder, or lost to another holder (which should not happen).", "kind"),
		lost: s.Counter("ctrlkit_shard_membership_lapses_total",
			"Times this replica could not renew its membership in time and stopped every shard."),
		conflicts: s.Counter("ctrlkit_shard_table_conflicts_total",
			"Writes of the ring's table that another replica's write beat (retried)."),
		notOwned: s.Counter("ctrlkit_shard_keys_not_owned_total",
			"Keys that reached a worker while their shard was not open here, dropped (their owner reconciles them)."),
	}
	if err := s.Register(); err != nil {
		return nil, fmt.Errorf("shard: metrics: %w", err)
	}
	return m, nil
}
