package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
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
	return shard.NewSharder(f.sharderOptions(kube))
}

// sharderOptions are the options of the fleet's sharder, whose client is
// kube.
func (f *Fleet) sharderOptions(kube kubernetes.Interface) shard.SharderOptions {
	ring := f.opts.Ring
	ring.Key = shard.Namespace // unused: clusters are hashed by name
	return shard.SharderOptions{Kube: kube, Ring: ring, DrainTimeout: f.opts.DrainTimeout, Relist: f.rebalance,
		Acquired: f.queueAcquired, Telemetry: f.opts.Controller.Telemetry}
}

// clusterHash places a cluster in the ring (see shard.SpreadHash: cluster
// names are often alike).
func clusterHash(name string) uint64 { return shard.SpreadHash(name) }

// keyHash places a key in the ring: by its cluster's name, or for a
// spread cluster (Options.Spread) by the whole key, k.String(), hashed
// without building it (a spread cluster's informers hash every event).
func (f *Fleet) keyHash(k Key) uint64 {
	switch {
	case !f.spread[k.Cluster]:
		return clusterHash(k.Cluster)
	case k.Namespace == "":
		return shard.SpreadHashJoin('/', k.Cluster, k.Name)
	}
	return shard.SpreadHashJoin('/', k.Cluster, k.Namespace, k.Name)
}

// ringPartition lets the controller reconcile a key only while its shard
// (see keyHash) is open on this replica.
type ringPartition struct{ f *Fleet }

func (p ringPartition) Enter(ctx context.Context, k Key) (context.Context, func(), bool) {
	return p.f.sharder.Enter(ctx, p.f.keyHash(k))
}

// local reports whether the cluster called name is engaged on this
// replica: always without a ring or for a spread cluster, else when its
// name hashes into the shards this replica holds.
func (f *Fleet) local(name string) bool {
	if f.sharder == nil || f.spread[name] {
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
// engaged have listed, and those cut to its share of a spread cluster
// listed again (at the same time), or cannot (a cluster whose informers
// report an error, one that is down, does not hold up the others' shards:
// its keys fail and are retried until it answers).
func (f *Fleet) rebalance(ctx context.Context) error {
	added, err := f.place()
	if err != nil {
		return err
	}
	relisted := make(chan error, 1) // the relists end with ctx at the latest
	go func() { relisted <- f.relistSpread(ctx, added) }()
	if err := f.awaitSynced(ctx, added); err != nil {
		return err
	}
	return <-relisted
}

// awaitSynced waits until each of ms has synced or reports an error.
func (f *Fleet) awaitSynced(ctx context.Context, ms []*member) error {
	for _, m := range ms {
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

// queueAcquired queues every cached primary object in the shards this
// replica just opened (of the clusters in them, and of the spread clusters
// the objects in them): their previous replica may have left work undone.
func (f *Fleet) queueAcquired(in func(hash uint64) bool) {
	f.mu.Lock()
	var ms []*member
	for name, m := range f.clusters {
		if f.spread[name] || in(clusterHash(name)) {
			ms = append(ms, m)
		}
	}
	f.mu.Unlock()
	for _, m := range ms {
		event := "its cluster moved to this replica"
		if f.spread[m.name] {
			event = "its shard moved to this replica"
		}
		for _, r := range m.sources() {
			if r.primaries == nil {
				continue
			}
			for _, n := range r.primaries() {
				if k := (Key{Cluster: m.name, ObjectName: n}); !f.spread[m.name] || in(f.keyHash(k)) {
					f.ctrl.AddBecause(k, controller.Reason{Event: event})
				}
			}
		}
	}
}

// Ready reports an error while the fleet cannot take its share of work:
// with a ring, while this replica has not joined it or its clusters'
// caches do not yet reflect the shards it claimed (see shard.Sharder.Ready).
// It does not depend on any one cluster's health (see Status).
func (f *Fleet) Ready() error {
	if err := f.providersReady(); err != nil {
		return err
	}
	if f.sharder == nil {
		return nil
	}
	if err := f.sharder.Ready(); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// providersReady fails while a provider's cache (the kubeconfig Secrets')
// has not listed yet, with the reason its list failed: the provider cannot
// engage a cluster until it has (a Secrets provider without RBAC to list
// its Secrets would otherwise look idle, ready, with no cluster).
func (f *Fleet) providersReady() error {
	f.mu.Lock()
	watched := maps.Clone(f.watched)
	f.mu.Unlock()
	for _, name := range sortedKeys(watched) { // the caches' locks are not taken under f.mu
		c := watched[name]
		if c.synced() {
			continue
		}
		if err := c.lastErr(); err != nil {
			return fmt.Errorf("%s: not listed yet: %w", name, err) // the name starts with the fleet's
		}
		return fmt.Errorf("%s: not listed yet", name)
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

// spreadShard is the share of a spread cluster's objects a replica caches:
// those whose key falls in the shards it holds or is acquiring; for an
// owned object (owner set: the For kind), its controller owner's key. An
// owned object with no such owner queues nothing, and is not cached. The
// API server cannot select by these keys: the informer filters on the
// client (every object is still received).
type spreadShard struct {
	f       *Fleet
	sel     *shard.Selector
	cluster string
	owner   schema.GroupKind
}

// spreadShard returns the listwatch shard of a spread cluster's source:
// this replica's selection as it is at each call.
func (f *Fleet) spreadShard(cluster string, owner schema.GroupKind) func() listwatch.Shard {
	return func() listwatch.Shard {
		sel := f.sharder.Selector()
		if sel == nil {
			return nil
		}
		return spreadShard{f: f, sel: sel, cluster: cluster, owner: owner}
	}
}

func (s spreadShard) ServerSelector() string { return "" }

func (s spreadShard) Contains(obj metav1.Object) bool {
	name := object.ObjectName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if !s.owner.Empty() {
		var ok bool
		if name, ok = handler.ControllerOf(obj, s.owner); !ok {
			return false
		}
	}
	return s.sel.MatchesHash(s.f.keyHash(Key{Cluster: s.cluster, ObjectName: name}))
}

// relistSpread lists again, in each spread cluster engaged here and not
// just engaged (skip), the informers cut to this replica's share, and
// returns once they reflect its shards, or once a cluster reports an error
// (a cluster that is down must not hold up the ring: its informers list
// when it answers).
func (f *Fleet) relistSpread(ctx context.Context, skip []*member) error {
	f.mu.Lock()
	var ms []*member
	for name, m := range f.clusters {
		if f.spread[name] && !slices.Contains(skip, m) {
			ms = append(ms, m)
		}
	}
	f.mu.Unlock()
	for _, m := range ms {
		for _, r := range m.sources() {
			if r.relist == nil {
				continue
			}
			done := make(chan error, 1)
			go func() { done <- r.relist(ctx, errShardsChanged) }()
			if err := f.awaitRelist(ctx, m, done); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitRelist waits for a relist of m's to end (done), for m to report an
// error, or for ctx. A relist of an informer that stopped (m left the
// fleet meanwhile) is no error.
func (f *Fleet) awaitRelist(ctx context.Context, m *member, done <-chan error) error {
	for {
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil && m.cluster.Err() == nil && !errors.Is(err, informer.ErrStopped) {
				return fmt.Errorf("fleet: cluster %s: %w", m.name, err)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond): // polling the cluster's health, owned by its informers
			if m.cluster.Err() != nil {
				return nil
			}
		}
	}
}

// errShardsChanged is the cause of a spread cluster's relist after this
// replica's shards changed.
var errShardsChanged = errors.New("fleet: this replica's shards changed")
