package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Controllers come and go while the manager runs: NewController after Run
// starts the controller at once (its workers once its caches synced), and
// RemoveController stops one. Each controller runs under a context of its
// own, from a starter: one for the controllers every replica runs, one
// for those that run while this replica leads (inside the elector's
// fence).

var (
	// ErrNoController is RemoveController's error for a controller that is
	// not the manager's: removed already, or never added.
	ErrNoController = errors.New("not a controller of this manager (removed already?)")
	// ErrStopping is NewController's error once the manager's Run is
	// ending or has returned.
	ErrStopping = errors.New("manager: stopping: no controller can be added")
	// ErrShardedLate is NewController's error for a controller added while
	// a sharded manager runs: a sharded manager decides how its informers
	// are cut by shard from its controllers when Run starts, so it takes
	// them all before.
	ErrShardedLate = errors.New("manager: a sharded manager takes its controllers before Run")
	// errRemoved is the cause of a removed controller's context.
	errRemoved = errors.New("manager: controller removed")
)

// controllerLife is a controller's run state, shared by every copy of its
// entry.
type controllerLife struct {
	regs      []func() // remove its handlers from its sources' informers
	unrelease func()   // unregisters its read-your-writes callback; nil without
	late      bool     // added after Run started: its sync does not make the replica unready

	mu      sync.Mutex
	removed bool
	cancel  context.CancelCauseFunc // while it runs
	done    chan struct{}           // closed when its Run returned; nil until it starts
	err     error                   // its Run's, once done
}

// start gives the controller its context, unless it was removed.
func (l *controllerLife) start(ctx context.Context) (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return nil, false
	}
	cctx, cancel := context.WithCancelCause(ctx)
	l.cancel, l.done = cancel, make(chan struct{})
	return cctx, true
}

// finish records the end of the controller's Run and reports whether the
// error is the manager's (not when the controller was removed: then it is
// RemoveController's).
func (l *controllerLife) finish(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel(nil)
	l.err = err
	close(l.done)
	if l.removed {
		return nil
	}
	return err
}

// stop marks the controller removed and, if it runs, cancels it and waits
// for its Run to return (in-flight reconciles finish within its
// ShutdownTimeout); it returns that Run's error.
func (l *controllerLife) stop() error {
	l.mu.Lock()
	l.removed = true
	done, cancel := l.done, l.cancel
	l.mu.Unlock()
	if done == nil {
		return nil // never started
	}
	cancel(errRemoved)
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// starter runs the controllers given to it, before and while it runs, each
// under a context of its own derived from run's. The first error of one
// that was not removed stops the others and is run's.
type starter struct {
	mu      sync.Mutex
	pending []controllerEntry
	wake    chan struct{} // one token: pending grew
}

func newStarter() *starter { return &starter{wake: make(chan struct{}, 1)} }

// add has e started by run (at once if run runs).
func (s *starter) add(e controllerEntry) {
	s.mu.Lock()
	s.pending = append(s.pending, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drop forgets c if it waits to be started (a controller removed while a
// standby waits to lead must not stay reachable from here).
func (s *starter) drop(c *Controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = slices.DeleteFunc(s.pending, func(e controllerEntry) bool { return e.c == c })
}

// run starts the pending controllers and each one added later until ctx
// ends, then returns once all have returned.
func (s *starter) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		for _, e := range batch {
			if cctx, ok := e.life.start(gctx); ok {
				g.Go(func() error { return e.life.finish(e.run(cctx)) })
			}
		}
		select {
		case <-gctx.Done():
			return g.Wait()
		case <-s.wake:
		}
	}
}

// RemoveController stops c, one of m's controllers, and forgets it: its
// handlers leave its sources' informers (no key is queued for it any
// more), its in-flight reconciles finish (within its ShutdownTimeout, then
// they are cancelled), its queue and goroutines end, and its metrics, its
// /readyz line and its debug-page entries go. It returns once all of that
// is done, with the error its Run returned, if any (ErrShutdownTimeout
// for a reconcile that ignored its context). It gives back the
// controller's references to its informers: one that no other controller
// and no reader holds (see ReleaseInformer) stops. A controller of the
// same name can be added afterwards. Before Run, c is only forgotten. An
// unknown or already removed c is ErrNoController.
func (m *Manager) RemoveController(c *Controller) error {
	if c == nil {
		return fmt.Errorf("manager: RemoveController(nil): %w", ErrNoController)
	}
	m.mu.Lock()
	i := slices.IndexFunc(m.controllers, func(e controllerEntry) bool { return e.c == c })
	if i < 0 {
		m.mu.Unlock()
		return fmt.Errorf("manager: controller %s: %w", c.Name(), ErrNoController)
	}
	e := m.controllers[i]
	m.controllers = slices.Delete(slices.Clone(m.controllers), i, i+1) // a new array: no reader's view shifts
	m.mu.Unlock()
	for _, remove := range e.life.regs {
		remove()
	}
	if e.life.unrelease != nil {
		e.life.unrelease()
	}
	m.starterFor(e).drop(c)
	err := e.life.stop()
	c.Close()
	m.opts.Logger.Info("manager: controller removed", "controller", c.Name())
	m.releaseSources(e.sources)
	return err
}

// addLateLocked hands e, added while the manager runs, to its starter;
// m.mu is held.
func (m *Manager) addLateLocked(e controllerEntry) error {
	switch {
	case m.stopping:
		return ErrStopping
	case m.sharder != nil:
		return ErrShardedLate
	}
	e.life.late = true
	m.controllers = append(m.controllers, e)
	m.starterFor(e).add(e)
	m.opts.Logger.Info("manager: controller added", "controller", e.c.Name())
	return nil
}

// starterFor is the starter that runs e: the leader's, with leader
// election, unless e runs on every replica.
func (m *Manager) starterFor(e controllerEntry) *starter {
	if m.elector != nil && !e.every {
		return m.leaderStarter
	}
	return m.everyStarter
}

// ErrNoInformer is ReleaseInformer's error for an informer the manager
// does not hold: released as often as it was asked for already, or not
// the manager's.
var ErrNoInformer = errors.New("not an informer this manager holds (released already?)")

// ReleaseInformer gives back one reference to inf, an informer Informer or
// Projection returned or a set InNamespaces returned: each call of those
// takes one, and each controller holds one on each of its sources'
// informers until RemoveController. The last release takes the informer
// off the debug page at once, then stops it (its reflector and handlers),
// takes it off /readyz and the read-your-writes ledger and unregisters its
// metrics, and returns once all that is done (one watching while it runs
// sees the series leave /metrics a little after the debug page's row); it
// drops the manager's references to its cache; a later
// Informer call of that type and scope makes a new one. Whoever still
// holds inf reads a cache that no longer changes. A set's last release
// releases each of its namespaces' informers.
func (m *Manager) ReleaseInformer(inf interface{ Name() string }) error {
	if inf == nil {
		return fmt.Errorf("manager: ReleaseInformer(nil): %w", ErrNoInformer)
	}
	m.mu.Lock()
	if m.refs[inf.Name()] == 0 {
		m.mu.Unlock()
		return fmt.Errorf("manager: informer %s: %w", inf.Name(), ErrNoInformer)
	}
	after := m.releaseLocked(inf.Name())
	m.mu.Unlock()
	after()
	return nil
}

// namespaceSet is the manager's view of a Namespaces set.
type namespaceSet interface {
	close()
	memberNames() []string
	kind() schema.GroupVersionKind
	namespaces() []string
}

// releaseLocked drops one reference to the informer or set called name;
// at the last, it forgets it and returns what stops it, to be called once
// m.mu is released. m.mu is held.
func (m *Manager) releaseLocked(name string) (after func()) {
	if m.refs[name]--; m.refs[name] > 0 {
		return func() {}
	}
	delete(m.refs, name)
	if set, ok := m.sets[name]; ok {
		delete(m.sets, name)
		return set.close
	}
	i := slices.IndexFunc(m.informers, func(e informerEntry) bool { return e.name == name })
	if i < 0 {
		return func() {} // not the factory's (an unusable one)
	}
	e := m.informers[i]
	m.informers = slices.Delete(slices.Clone(m.informers), i, i+1)
	return func() { m.stopInformer(e) }
}

// stopInformer stops e, an informer no one holds any more, and takes it
// out of the factory, the ledger and the metrics.
func (m *Manager) stopInformer(e informerEntry) {
	m.factory.Remove(e.key) // returns once it stopped: its resource mapping cannot tell the ledger any more
	m.mu.Lock()
	remove := e.writes.remove
	m.mu.Unlock()
	if remove != nil {
		remove()
	}
	m.received.bytes.DeleteLabelValues(e.name)
	m.received.sinceList.DeleteLabelValues(e.name)
	m.received.fallback.DeleteLabelValues(e.name)
	m.opts.Logger.Info("manager: informer stopped: no controller or reader holds it", "informer", e.name)
}

// holdLocked takes a reference to each informer of sources, for a
// controller; m.mu is held.
func (m *Manager) holdLocked(sources []Source) {
	for _, s := range sources {
		if name := s.informerName(); name != "" {
			m.refs[name]++
		}
	}
}

// releaseSources gives back a removed controller's references to its
// sources' informers, stopping those no one holds any more.
func (m *Manager) releaseSources(sources []Source) {
	var after []func()
	m.mu.Lock()
	for _, s := range sources {
		if name := s.informerName(); name != "" && m.refs[name] > 0 {
			after = append(after, m.releaseLocked(name))
		}
	}
	m.mu.Unlock()
	for _, f := range after {
		f()
	}
}
