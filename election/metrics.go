package election

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics are one Lease's series; a nil *metrics records nothing.
type metrics struct {
	isLeader    prometheus.Gauge
	transitions prometheus.Counter
	lastRenew   prometheus.Gauge
}

func newMetrics(tel telemetry.Telemetry, lease string) (*metrics, error) {
	return telemetry.Build(tel, prometheus.Labels{"lease": lease}, func(s *telemetry.Series) *metrics {
		return &metrics{
			isLeader:    s.Gauge("ctrlkit_leader_election_is_leader", "1 while this replica holds the lease."),
			transitions: s.Counter("ctrlkit_leader_election_transitions_total", "Times this replica started or stopped leading."),
			lastRenew: s.Gauge("ctrlkit_leader_election_last_renew_timestamp_seconds",
				"Unix time of this replica's last successful acquire or renewal of the lease (time since: now minus this)."),
		}
	})
}

func (m *metrics) leading(v bool) {
	if m == nil {
		return
	}
	m.transitions.Inc()
	if v {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
	}
}

func (m *metrics) renewed() {
	telemetry.Record(m, func() { m.lastRenew.Set(float64(time.Now().UnixNano()) / 1e9) })
}

// observedLock tells fence of every successful write of the lease record
// under this identity (an acquire or a renewal), with the time it was sent:
// the other replicas count the lease's expiry from no earlier than that
// moment, so the fencing deadline is counted from it too.
type observedLock struct {
	resourcelock.Interface
	identity string
	renewed  func()
	fence    *lease.Fence
}

func (l *observedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.record(sent, ler, err)
	return err
}

func (l *observedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.record(sent, ler, err)
	return err
}

func (l *observedLock) record(sent time.Time, ler resourcelock.LeaderElectionRecord, err error) {
	if err != nil || ler.HolderIdentity != l.identity { // a failure, or a release
		return
	}
	l.fence.Renewed(sent)
	l.renewed()
}
