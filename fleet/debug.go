package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/object"
)

// DebugSource is the fleet as package debug's page shows it: mount
// debug.New(f.DebugSource(), opts) on a listener. Each cluster engaged on
// this replica is a row per source's informer, named "<cluster>: <Kind>",
// with its health (its last list or watch error, failing while the
// cluster is down); the fleet's controller is one row, its queue's keys
// naming their cluster; with a ring, this replica's share. Keys are not
// explained yet (a fleet's key has three parts; the page's explain form
// takes two).
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
		for _, r := range m.runs {
			out := debug.FromInformer(r.stats(), r.lastErr(), now)
			out.Kind, out.Namespace, out.LabelSelector, out.FieldSelector = r.kind, r.scope.Namespace, r.scope.LabelSelector, r.scope.FieldSelector
			st.Informers = append(st.Informers, out)
		}
	}
	st.Controllers = append(st.Controllers, debug.FromController(f.ctrl.Stats(), "", now))
	if sh := f.sharder; sh != nil {
		st.Shard = debug.FromShard(f.opts.Ring.Namespace+"/"+f.opts.Ring.Name, sh.Stats(), sh.Ready())
	}
	return st
}

// errNoExplain is Explain's error: see DebugSource.
var errNoExplain = errors.New("a fleet's keys name their cluster and cannot be explained by namespace/name yet")

func (s debugSource) Explain(name string, _ object.ObjectName) (debug.Explanation, error) {
	if name != s.f.ctrl.Name() {
		return debug.Explanation{}, fmt.Errorf("fleet: %q: %w", name, debug.ErrUnknownController)
	}
	return debug.Explanation{}, fmt.Errorf("fleet: %w", errNoExplain)
}
