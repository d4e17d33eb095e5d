package manager

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/object"
)

// ErrDebugExposed reports, at start, an HTTP listener on an address other
// than loopback that would serve /debug/ctrlkit or pprof without a token.
var ErrDebugExposed = errors.New("manager: the debug page or pprof would be served beyond loopback without a token")

// checkDebug refuses to expose the debug page or pprof beyond loopback
// without a token: the page names every object the controllers touch, and
// pprof shows the command line, memory and every goroutine's stack.
func (m *Manager) checkDebug() error {
	o := m.opts
	if o.HTTPAddr == "0" || (o.DisableDebug && !o.EnablePprof) || o.DebugToken != "" || debug.IsLoopbackAddr(o.HTTPAddr) {
		return nil
	}
	what, off := "the debug page", "Options.DisableDebug"
	switch {
	case o.EnablePprof && o.DisableDebug:
		what, off = "pprof", "turn Options.EnablePprof off"
	case o.EnablePprof:
		what, off = "the debug page and pprof", "Options.DisableDebug and turn Options.EnablePprof off"
	}
	return fmt.Errorf("%w: Options.HTTPAddr %q is not a loopback address and would serve %s; set Options.DebugToken "+
		"(clients other than loopback ones then send it as a bearer token), or %s, or bind to 127.0.0.1",
		ErrDebugExposed, o.HTTPAddr, what, off)
}

// debugHandler serves /debug/ctrlkit for the manager.
func (m *Manager) debugHandler() http.Handler {
	return debug.New(debugSource{m}, m.debugOptions())
}

// debugSource is the manager seen by the debug page.
type debugSource struct{ m *Manager }

// State composes the stages' snapshots; nothing is kept between calls.
func (s debugSource) State() debug.State {
	m := s.m
	now := time.Now()
	m.mu.Lock()
	entries := slices.Clone(m.informers)
	ctrls := slices.Clone(m.controllers)
	fleets := slices.Clone(m.fleets)
	m.mu.Unlock()
	st := debug.State{Time: now, Informers: []debug.Informer{}, Controllers: []debug.Controller{}}
	byName := map[string]informerEntry{}
	for _, e := range entries {
		byName[e.name] = e
	}
	failing := map[string]error{}
	for _, fs := range m.factory.Statuses() {
		failing[fs.Name] = fs.Err
	}
	for _, is := range m.factory.Stats() {
		e := byName[is.Name]
		out := debug.FromInformer(is, failing[is.Name], now)
		if e.name != "" {
			out.Kind = strings.TrimPrefix(e.gvk.GroupVersion().String()+" "+e.gvk.Kind, "/")
			out.Namespace, out.LabelSelector, out.FieldSelector = e.scope.Namespace, e.scope.LabelSelector, e.scope.FieldSelector
			if gr, ok := m.resourceOf(e.name); ok {
				out.Resource = strings.TrimSuffix(gr.Resource+"."+gr.Group, ".") + "/" + e.gvk.Version
			}
		}
		st.Informers = append(st.Informers, out)
	}
	for _, c := range ctrls {
		st.Controllers = append(st.Controllers, debug.FromController(c.c.Stats(), m.leaderState(c), now))
	}
	if el := m.elector; el != nil {
		le := m.opts.LeaderElection
		ns := le.Namespace
		if ns == "" {
			ns = "default"
		}
		st.Leader = &debug.Leader{Lease: ns + "/" + le.Name, Identity: el.Identity(), Holder: el.Leader(),
			Leading: el.IsLeader()}
	}
	if sh := m.sharder; sh != nil {
		st.Shard = debug.FromShard(m.opts.Sharding.Namespace+"/"+m.opts.Sharding.Name, sh.Stats(), sh.Ready())
	}
	addFleets(&st, fleets)
	for _, w := range m.waitingFor() {
		var failed string
		if why := w.failed.Load(); why != nil {
			failed = *why
		}
		st.Waiting = append(st.Waiting, debug.Waiting{Kind: w.gvk.String(), CRD: w.crd, SetupError: failed})
	}
	if len(m.webhooks.Paths()) > 0 {
		m.mu.Lock()
		addr := m.webhookAddr
		m.mu.Unlock()
		st.Webhooks = debug.FromWebhooks(m.webhooks.Stats(), addr)
	}
	return st
}

// addFleets adds NewFleet's fleets to st: a row per engaged cluster's
// informer, the fleet's controller, the clusters it refused, and its
// ring's share if st has none.
func addFleets(st *debug.State, fleets []*fleet.Fleet) {
	for _, f := range fleets {
		fs := f.DebugSource().State()
		st.Informers = append(st.Informers, fs.Informers...)
		st.Controllers = append(st.Controllers, fs.Controllers...)
		st.Refused = append(st.Refused, fs.Refused...)
		if st.Shard == nil {
			st.Shard = fs.Shard
		}
	}
}

// leaderState is debug.Controller.Leader for the controller c.
func (m *Manager) leaderState(c controllerEntry) string {
	switch {
	case m.elector == nil:
		return ""
	case c.every:
		return "every replica"
	case m.elector.IsLeader():
		return "leading"
	}
	return "standby"
}

// Explain explains key ("namespace/name" or "name") for the controller
// called name, looking it up in the controller's For informer.
func (s debugSource) Explain(name, raw string) (debug.Explanation, error) {
	m := s.m
	m.mu.Lock()
	var found *controllerEntry
	var names []string
	for k := range m.controllers {
		names = append(names, m.controllers[k].c.Name())
		if m.controllers[k].c.Name() == name {
			e := m.controllers[k] // a copy: RemoveController may change the slice once mu is released
			found = &e
		}
	}
	fleets := slices.Clone(m.fleets)
	m.mu.Unlock()
	if found == nil {
		for _, f := range fleets {
			if f.Controller().Name() == name {
				return f.DebugSource().Explain(name, raw)
			}
			names = append(names, f.Controller().Name())
		}
		return debug.Explanation{}, fmt.Errorf("%w %q; the controllers are %q", debug.ErrUnknownController, name, names)
	}
	key, err := object.ParseObjectName(raw)
	if err != nil {
		return debug.Explanation{}, fmt.Errorf("%w %q: want namespace/name, or name for a cluster-scoped object (%v)",
			debug.ErrMalformedKey, raw, err)
	}
	return debug.Explain(name, key, key, found.c.KeyStats(key), found.primary, time.Now()), nil
}
