package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/object"
)

// DebugSource is the fleet as package debug's page shows it: mount
// debug.New(f.DebugSource(), opts) on a listener (manager.NewFleet puts it
// on the manager's page). Each cluster engaged on this replica is a row
// per source's informer, named "<cluster>: <Kind>" (a second source of a
// kind with its role and scope: "<cluster>: ConfigMap (Owns, labels
// replica=true)"), with its health (its
// last list or watch error, failing while the cluster is down); the
// fleet's controller is one row, its queue's keys naming their cluster;
// with a ring, this replica's share; the clusters offered but refused
// (Refused), with their errors. A key is explained as it prints,
// "cluster/namespace/name" ("cluster/name" for a cluster-scoped object),
// looked up in the For source's cache of its cluster when that cluster is
// engaged here.
func (f *Fleet) DebugSource() debug.Source { return debugSource{f} }

type debugSource struct{ f *Fleet }

func (s debugSource) State() debug.State {
	f, now := s.f, time.Now()
	st := debug.State{Time: now, Informers: []debug.Informer{}, Controllers: []debug.Controller{}}
	f.mu.Lock()
	members := make([]*member, 0, len(f.clusters))
	for _, name := range sortedKeys(f.clusters) {
		members = append(members, f.clusters[name])
	}
	f.mu.Unlock()
	for _, m := range members {
		for _, r := range m.sources() {
			out := debug.FromInformer(r.stats(), r.lastErr(), now)
			out.Kind, out.Namespace, out.LabelSelector, out.FieldSelector = r.kind, r.scope.Namespace, r.scope.LabelSelector, r.scope.FieldSelector
			st.Informers = append(st.Informers, out)
		}
	}
	st.Controllers = append(st.Controllers, debug.FromController(f.ctrl.Stats(), "", now))
	for _, r := range f.Refused() {
		st.Refused = append(st.Refused, debug.Refused{Cluster: r.Name, Error: r.Err.Error()})
	}
	if sh := f.sharder; sh != nil {
		st.Shard = debug.FromShard(f.opts.Ring.Namespace+"/"+f.opts.Ring.Name, sh.Stats(), sh.Ready())
	}
	return st
}

func (s debugSource) Explain(name, raw string) (debug.Explanation, error) {
	f := s.f
	if name != f.ctrl.Name() {
		return debug.Explanation{}, fmt.Errorf("fleet: %q: %w", name, debug.ErrUnknownController)
	}
	cluster, rest, _ := strings.Cut(raw, "/")
	n, err := object.ParseObjectName(rest)
	if cluster == "" || err != nil {
		return debug.Explanation{}, fmt.Errorf("fleet: %w %q: want cluster/namespace/name, or cluster/name for a cluster-scoped object",
			debug.ErrMalformedKey, raw)
	}
	k := Key{Cluster: cluster, ObjectName: n}
	var cache debug.Cache
	f.mu.Lock()
	if m := f.clusters[cluster]; m != nil {
		for _, r := range m.sources() {
			if r.cache != nil { // For's
				cache = r.cache
				break
			}
		}
	}
	f.mu.Unlock()
	return debug.Explain(name, k, n, f.ctrl.KeyStats(k), cache, time.Now()), nil
}
