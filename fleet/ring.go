package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/shard"
)

// newSharder makes the sharder of a fleet whose Options.Ring is named.
func (f *Fleet) newSharder() (*shard.Sharder, error) {
	if f.opts.RingConfig == nil {
		return nil, errors.New("fleet: Options.Ring needs Options.RingConfig (the cluster where the ring's Leases live)")
	}
	cfg := rest.CopyConfig(f.opts.RingConfig)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: the ring's client: %w", err)
	}
	ring := f.opts.Ring
	ring.Key = shard.Namespace // unused: clusters are hashed by name
	return shard.NewSharder(shard.SharderOptions{Kube: kube, Ring: ring, Relist: f.rebalance,
		Acquired: f.queueAcquired, Telemetry: f.opts.Controller.Telemetry})
}

// clusterHash places a cluster in the ring (see shard.SpreadHash: cluster
// names are often alike).
func clusterHash(name string) uint64 { return shard.SpreadHash(name) }

// clusterPartition lets the controller reconcile a key only while its
// cluster's shard is open on this replica.
type clusterPartition struct{ s *shard.Sharder }

func (p clusterPartition) Enter(ctx context.Context, k Key) (context.Context, func(), bool) {
	return p.s.Enter(ctx, clusterHash(k.Cluster))
}

// local reports whether the cluster called name is this replica's: always
// without a ring, else when its name hashes into the shards it holds.
func (f *Fleet) local(name string) bool {
	if f.sharder == nil {
		return true
	}
	sel := f.sharder.Selector()
	return sel != nil && sel.MatchesHash(clusterHash(name))
}

// place engages here the offered clusters that are this replica's and
// disengages here those that no longer are (the sharder drained their
// reconciles first), and returns the clusters it engaged.
func (f *Fleet) place() ([]*member, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, nil
	}
	var add []string
	var drop []*member
	for name := range f.offered {
		m, here := f.clusters[name]
		switch want := f.local(name); {
		case want && !here:
			add = append(add, name)
		case !want && here:
			delete(f.clusters, name)
			drop = append(drop, m)
		}
	}
	for name, m := range f.clusters {
		if _, ok := f.offered[name]; !ok {
			delete(f.clusters, name)
			drop = append(drop, m)
		}
	}
	f.mu.Unlock()
	for _, m := range drop {
		m.close()
		f.metrics.disengaged(m.name)
	}
	var added []*member
	var errs []error
	for _, name := range add {
		f.mu.Lock()
		cfg := f.offered[name]
		f.mu.Unlock()
		if cfg == nil {
			continue
		}
		m, err := f.engageHere(name, cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m != nil {
			added = append(added, m)
		}
	}
	return added, errors.Join(errs...)
}

// rebalance is the sharder's Relist: it places the clusters for the
// shards this replica now holds and returns once the caches of those it
// engaged have listed, or cannot (a cluster whose informers report an
// error, one that is down, does not hold up the others' shards: its keys
// fail and are retried until it answers).
func (f *Fleet) rebalance(ctx context.Context) error {
	added, err := f.place()
	if err != nil {
		return err
	}
	for _, m := range added {
		for !m.cluster.Synced() && m.cluster.Err() == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond): // polling informers owned by another goroutine
			}
		}
	}
	return nil
}

// queueAcquired queues every cached primary object of the clusters in the
// shards this replica just opened: their previous replica may have left
// work undone.
func (f *Fleet) queueAcquired(in func(hash uint64) bool) {
	f.mu.Lock()
	var ms []*member
	for name, m := range f.clusters {
		if in(clusterHash(name)) {
			ms = append(ms, m)
		}
	}
	f.mu.Unlock()
	for _, m := range ms {
		for _, r := range m.runs {
			if r.primaries == nil {
				continue
			}
			for _, n := range r.primaries() {
				f.ctrl.AddBecause(Key{Cluster: m.name, ObjectName: n}, controller.Reason{Event: "its cluster moved to this replica"})
			}
		}
	}
}

// Ready reports an error while the fleet cannot take its share of work:
// with a ring, while this replica has not joined it or its clusters'
// caches do not yet reflect the shards it claimed (see shard.Sharder.Ready).
// It does not depend on any one cluster's health (see Status).
func (f *Fleet) Ready() error {
	if f.sharder == nil {
		return nil
	}
	if err := f.sharder.Ready(); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Here returns the clusters this replica works on, sorted: every engaged
// cluster without a ring, its share with one.
func (f *Fleet) Here() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.clusters)
}
