package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Sharding spreads the controllers' keys over every replica running with
// the same ring (its Name and Namespace; see package shard and
// docs/design/003-sharding.md): each replica reconciles the keys of the
// virtual shards it holds, and its informers list and watch only those
// shards' objects, filtered by the API server itself where it has the
// ShardedListAndWatch feature (on the client otherwise, said once in the
// log and in ctrlkit_informer_shard_fallback). Setting Name turns it on.
//
// Which informers are cut: a For source's by the object's own key; an Owns
// source's by the object's namespace (Key Namespace) or by its controller
// owner's UID, on the client (Key UID); an informer that also feeds a
// Watches source, or a controller named in EveryReplica, keeps every
// object. Every controller except those in EveryReplica reconciles only
// the keys of its replica's shards. It is the sharder's own shard.Ring:
// the options are declared once.
type Sharding = shard.Ring

// errShardsChanged is the cause of a relist after this replica's shards changed.
var errShardsChanged = errors.New("manager: this replica's shards changed")

// newSharder makes the manager's sharder from its options.
func (m *Manager) newSharder() (*shard.Sharder, error) {
	o := m.opts.Sharding
	if o.Namespace == "" {
		return nil, fmt.Errorf("manager: Options.Sharding.Namespace is required (where the ring's Leases live)")
	}
	if m.opts.LeaderElection.Name != "" {
		return nil, fmt.Errorf("manager: Options.Sharding and Options.LeaderElection are exclusive: a ring already gives each key one replica")
	}
	// Its own client, without client-side rate limiting: renewals must not
	// queue behind the reconcilers' writes (a lapse stops every shard).
	cfg := rest.CopyConfig(m.cfg)
	cfg.QPS = -1
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("manager: sharding client: %w", err)
	}
	return shard.NewSharder(shard.SharderOptions{Kube: kube, Ring: o, DrainTimeout: m.opts.ShutdownTimeout, Relist: m.relistSharded,
		Acquired: m.queueAcquired, Telemetry: telemetry.Telemetry{Logger: m.opts.Logger, Registerer: m.opts.Registry}})
}

// Sharder returns the manager's sharder, nil without Options.Sharding.
func (m *Manager) Sharder() *shard.Sharder { return m.sharder }

// Cut modes of an informer.
const (
	cutNone         int32 = iota // every object
	cutOwn                       // by its own UID or namespace (sent to the server)
	cutByController              // by its controller owner's UID (on the client)
)

// planSharding decides, before the informers start, which are cut and how.
func (m *Manager) planSharding(ctrls []controllerEntry) {
	if m.sharder == nil {
		return
	}
	want := map[string]int32{}
	all := map[string]bool{} // needs every object
	for _, c := range ctrls {
		for _, s := range c.sources {
			for _, name := range m.informersOf(s) {
				switch {
				case c.every || s.role() == roleWatches:
					all[name] = true
				case s.role() == roleFor || m.sharder.Key() == shard.Namespace:
					want[name] = merge(want[name], cutOwn)
				default:
					want[name] = merge(want[name], cutByController)
				}
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.informers {
		mode, ok := want[e.name]
		if !ok || all[e.name] || mode < 0 {
			continue
		}
		e.cut.Store(mode)
	}
}

// informersOf names the informers of s: its own, or its set's members.
func (m *Manager) informersOf(s Source) []string {
	name := s.informerName()
	m.mu.Lock()
	set, ok := m.sets[name]
	m.mu.Unlock()
	if ok {
		return set.memberNames()
	}
	return []string{name}
}

// merge combines two wishes for one informer: different cuts cannot both
// hold, so the informer keeps everything (-1).
func merge(a, b int32) int32 {
	if a == 0 || a == b {
		return b
	}
	return -1
}

// relistSharded makes every cut informer list again with the sharder's
// selector, and returns once all caches reflect it.
func (m *Manager) relistSharded(ctx context.Context) error {
	m.mu.Lock()
	var relists []func(context.Context, error) error
	for _, e := range m.informers {
		if e.cut.Load() != cutNone {
			relists = append(relists, e.relist)
		}
	}
	m.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range relists {
		g.Go(func() error { return r(gctx, errShardsChanged) })
	}
	return g.Wait()
}

// queueAcquired queues every cached primary object of every sharded
// controller whose hash is in the shards this replica just opened.
func (m *Manager) queueAcquired(in func(hash uint64) bool) {
	m.mu.Lock()
	ctrls := append([]controllerEntry(nil), m.controllers...)
	m.mu.Unlock()
	for _, c := range ctrls {
		if c.every || c.primaries == nil {
			continue
		}
		c.primaries(func(n object.ObjectName, uid types.UID) {
			if in(m.hashOf(n, uid)) {
				c.c.AddBecause(n, controller.Reason{Event: "its shard moved to this replica"})
			}
		})
	}
}

// hashOf is the shard hash of a primary object.
func (m *Manager) hashOf(n object.ObjectName, uid types.UID) uint64 {
	if m.sharder.Key() == shard.Namespace {
		return shard.Hash(n.Namespace)
	}
	return shard.Hash(string(uid))
}

// partition is a controller's controller.Partition: keys of the shards
// open on this replica.
type partition struct {
	m *Manager
	// uidOf finds a primary object's UID in the cache (Key UID only).
	uidOf func(object.ObjectName) (types.UID, bool)
	// gone remembers the UIDs of deleted primary objects whose key may
	// still be queued (Key UID only), for a while.
	mu   sync.Mutex
	gone map[object.ObjectName]goneUID
}

type goneUID struct {
	uid types.UID
	at  time.Time
}

// goneFor is how long a deleted primary's UID is remembered.
const goneFor = 10 * time.Minute

func (p *partition) Enter(ctx context.Context, key object.ObjectName) (context.Context, func(), bool) {
	if p.m.sharder.Key() == shard.Namespace {
		return p.m.sharder.Enter(ctx, shard.Hash(key.Namespace))
	}
	uid, ok := p.uidOf(key)
	if !ok {
		p.mu.Lock()
		g, found := p.gone[key]
		p.mu.Unlock()
		if !found {
			// Neither cached nor seen deleted here: not in this
			// replica's shards (its owner's cache holds it).
			return nil, nil, false
		}
		uid = g.uid
	}
	return p.m.sharder.Enter(ctx, shard.Hash(string(uid)))
}

// deleted remembers the UID of a deleted primary object.
func (p *partition) deleted(n object.ObjectName, uid types.UID) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone == nil {
		p.gone = map[object.ObjectName]goneUID{}
	}
	p.gone[n] = goneUID{uid: uid, at: now}
	if len(p.gone)%1024 == 0 {
		for k, g := range p.gone {
			if now.Sub(g.at) > goneFor {
				delete(p.gone, k)
			}
		}
	}
}

// received counts response bytes per informer and reports, once per
// informer, a server that did not apply the shard selector.
type received struct {
	bytes     *prometheus.CounterVec
	sinceList *prometheus.GaugeVec
	fallback  *prometheus.GaugeVec
}

func newReceived(reg prometheus.Registerer) (*received, error) {
	r := &received{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctrlkit_informer_received_bytes_total",
			Help: "Bytes of response bodies an informer received from the API server (lists and watches)."}, []string{"informer"}),
		sinceList: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ctrlkit_informer_received_bytes_since_list",
			Help: "Bytes an informer received since its latest list began (a one-object probe before a warm resume counts as one): that list's pages and the watch events after it."}, []string{"informer"}),
		fallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ctrlkit_informer_shard_fallback",
			Help: "1 when the API server did not apply an informer's shard selector and the informer filters on the client."}, []string{"informer"}),
	}
	for _, c := range []prometheus.Collector{r.bytes, r.sinceList, r.fallback} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("manager: metrics: %w", err)
		}
	}
	return r, nil
}

// cutOptions returns the listwatch options of an informer, cut as cut
// says once Run has planned the sharding.
func (m *Manager) cutOptions(base listwatch.Options, cut *atomic.Int32, name string) listwatch.Options {
	if m.sharder == nil {
		return base
	}
	base.Shard = func() listwatch.Shard {
		sel := m.sharder.Selector()
		switch {
		case sel == nil:
			return nil
		case cut.Load() == cutOwn:
			return sel
		case cut.Load() == cutByController:
			return shard.ByController{Selector: sel}
		}
		return nil
	}
	var once sync.Once
	base.OnShardNotApplied = func(reason string) {
		once.Do(func() {
			m.received.fallback.WithLabelValues(name).Set(1)
			m.opts.Logger.Warn("manager: the API server does not filter this informer by shard; filtering on the client (every object is still received)",
				"informer", name, "reason", reason)
		})
	}
	return base
}
