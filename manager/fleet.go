package manager

import (
	"context"
	"net/http"
	"reflect"

	"golang.org/x/sync/errgroup"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
)

// NewFleet makes a controller over a fleet of clusters (package fleet)
// that runs with m, and the providers that engage its clusters: Run starts
// them and stops them with the rest. With fleet.PerCluster as rec, a
// reconciler written for one cluster runs over every cluster unchanged.
//
// What m gives the fleet: its scheme (unless opts.Scheme is set), its
// registry and logger (unless opts.Controller's Telemetry sets them), so
// the fleet's metrics are on /metrics and its providers log through the
// manager's logger; its Options.Informers (unless opts.Informers is set),
// so that KeepManagedFieldsOf, and m.KeepManagedFieldsOf at any time,
// let apply.Apply skip writes in every cluster; a readiness check on
// /readyz ("fleet-" and the controller's name: the ring's, if opts.Ring
// is set; a provider that cannot list its kubeconfig Secrets makes it fail
// with the reason, a cluster that is down never does); the fleet's
// clusters' informers and its controller on the debug page; and what a
// provider that is a fleet.Watcher (fleet.Secrets) lists and watches, in
// the manifests' RBAC and the preflight check (another provider's needs go
// in Options.Permissions). With
// Options.LeaderElection the fleet runs on the leader only, unless
// opts.Ring spreads its clusters over the replicas: then on every one.
// Call it before Run. opts.Controller.Name defaults to "fleet". A
// provider with a Validate method (fleet.Secrets) is checked first: its
// error is NewFleet's.
func NewFleet(m *Manager, rec controller.Reconciler[fleet.Key], opts fleet.Options, providers ...fleet.Provider) (*fleet.Fleet, error) {
	for _, p := range providers {
		if v, ok := p.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil { // before the manifests grant what it would watch
				return nil, err
			}
		}
	}
	if opts.Scheme == nil {
		opts.Scheme = m.scheme
	}
	t := &opts.Controller.Telemetry
	if t.Registerer == nil {
		t.Registerer = m.opts.Registry
	}
	if t.Logger == nil {
		t.Logger = m.opts.Logger
	}
	if opts.Controller.Name == "" {
		opts.Controller.Name = "fleet"
	}
	if reflect.ValueOf(opts.Informers).IsZero() {
		opts.Informers = m.opts.Informers
	}
	if opts.Informers.KeepManagedFieldsOfAdded == nil {
		opts.Informers.KeepManagedFieldsOfAdded = m.keep // m.KeepManagedFieldsOf reaches the clusters' caches too
	}
	m.mu.Lock()
	err := m.once.Before("manager")
	if err == nil {
		err = m.nameFreeLocked(opts.Controller.Name) // the controllers' and fleets' names label one registry's series
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	f, err := fleet.New(rec, opts)
	if err != nil {
		return nil, err
	}
	if err := m.Add(fleetRunnable{f: f, providers: providers, every: opts.Ring.Name != ""}); err != nil {
		f.Controller().Close()
		return nil, err
	}
	m.AddReadyCheck("fleet-"+opts.Controller.Name, func(*http.Request) error { return f.Ready() })
	m.mu.Lock()
	m.fleets = append(m.fleets, f)
	m.providerPermissions = append(m.providerPermissions, providerPermissions(providers)...)
	m.mu.Unlock()
	return f, nil
}

// providerPermissions are what the providers list and watch in m's
// cluster, as those that are fleet.Watchers say (Secrets does): the
// manifests grant them and preflight checks them, as Options.Permissions.
func providerPermissions(providers []fleet.Provider) []Permission {
	var out []Permission
	for _, p := range providers {
		w, ok := p.(fleet.Watcher)
		if !ok {
			continue
		}
		for _, r := range w.Watches() {
			for _, verb := range []string{"list", "watch"} {
				out = append(out, Permission{Verb: verb, Group: r.Group, Resource: r.Resource, Namespace: r.Namespace})
			}
		}
	}
	return out
}

// fleetRunnable runs a fleet and its providers under the manager.
type fleetRunnable struct {
	f         *fleet.Fleet
	providers []fleet.Provider
	every     bool // on every replica: the fleet's ring spreads the clusters
}

func (r fleetRunnable) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.f.Run(ctx) })
	for _, p := range r.providers {
		g.Go(func() error { return p.Run(ctx, r.f) })
	}
	return g.Wait()
}

func (r fleetRunnable) NeedLeaderElection() bool { return !r.every }
