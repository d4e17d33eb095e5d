package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Controller is the controller type the manager builds: keys are typed
// object names.
type Controller = controller.Controller[object.ObjectName]

// ControllerOptions configure one controller of the manager: the
// controller's own options, and how the manager runs it. The zero value
// means the defaults.
type ControllerOptions struct {
	// Options are the controller's (workers, retries, timeouts, ...). Its
	// Name is NewController's name; its Logger, Registerer,
	// ShutdownTimeout and CacheSyncTimeout default to the manager's.
	controller.Options[object.ObjectName]
	// ReadYourWrites makes each key wait, before its reconcile, until the
	// manager's caches show the writes its earlier reconciles made through
	// the manager's clients (Kube, Config), or Options.ReadYourWritesBound
	// passed (see package ledger). Default: off.
	ReadYourWrites bool
	// EveryReplica runs the controller on every replica, even with
	// Options.LeaderElection (only the leader's controllers run otherwise)
	// or Options.Sharding (it reconciles every key, and its informers keep
	// every object): e.g. one that only reads, or only writes metrics.
	EveryReplica bool
}

// controllerEntry is a controller the manager runs.
type controllerEntry struct {
	c       *Controller
	run     func(context.Context) error
	primary debug.Cache // the For source's informer, for /debug/ctrlkit/explain
	sources []Source
	every   bool // ControllerOptions.EveryReplica: not sharded, not leader-elected
	ryw     bool // ControllerOptions.ReadYourWrites
	// primaries calls fn with every cached primary object (for sharding).
	primaries func(fn func(object.ObjectName, types.UID))
}

// Roles of a source.
const (
	roleFor = iota
	roleOwns
	roleWatches
)

// Source is where a controller's keys come from: an informer and how its
// events map to names of the controller's primary objects. Build one with
// For, Owns or Watches.
type Source interface {
	// register adds the source's handler to its informer and makes c wait
	// for it. primary is the kind of the controller's For source.
	// ryw is ControllerOptions.ReadYourWrites.
	register(m *Manager, c *Controller, primary schema.GroupVersionKind, p *partition, ryw bool) (*informer.Registration, error)
	isFor() bool
	role() int
	informerName() string
	// each calls fn with every cached object's name and UID.
	each(fn func(object.ObjectName, types.UID))
	kind(m *Manager) (schema.GroupVersionKind, error)
	cache() debug.Cache
}

// source is the one implementation of Source.
type source[T Object] struct {
	inf     *informer.SharedIndexInformer[T]
	filters []func(T) bool
	primary bool
	watches bool // a Watches source
	toNames func(q handler.Adder[object.ObjectName], primary schema.GroupVersionKind) handler.Handler[T]
}

// For makes the objects of inf the controller's primary objects: each
// change queues the object's own name. filters, if any, must all accept an
// object for it to count (see handler.Filtering: an object that stops
// passing is seen as deleted). A controller has exactly one For.
func For[T Object](inf *informer.SharedIndexInformer[T], filters ...func(T) bool) Source {
	return &source[T]{inf: inf, filters: filters, primary: true,
		toNames: func(q handler.Adder[object.ObjectName], _ schema.GroupVersionKind) handler.Handler[T] {
			return handler.EnqueueObject[T](q)
		}}
}

// Owns makes changes to the objects of inf queue the primary object that
// controls them (the owner reference with controller: true whose kind is
// the For kind; see handler.EnqueueOwner), so an owned object changed or
// deleted by someone else is put right.
func Owns[T Object](inf *informer.SharedIndexInformer[T], filters ...func(T) bool) Source {
	return &source[T]{inf: inf, filters: filters,
		toNames: func(q handler.Adder[object.ObjectName], primary schema.GroupVersionKind) handler.Handler[T] {
			return handler.EnqueueOwner[T](q, primary.GroupKind())
		}}
}

// Watches makes changes to the objects of inf queue the names mapFn returns
// (see handler.EnqueueMapped), e.g. every primary object that refers to a
// changed ConfigMap.
func Watches[T Object](inf *informer.SharedIndexInformer[T], mapFn func(T) []object.ObjectName, filters ...func(T) bool) Source {
	return &source[T]{inf: inf, filters: filters, watches: true,
		toNames: func(q handler.Adder[object.ObjectName], _ schema.GroupVersionKind) handler.Handler[T] {
			return handler.EnqueueMapped(q, mapFn)
		}}
}

func (s *source[T]) isFor() bool { return s.primary }

func (s *source[T]) role() int {
	switch {
	case s.primary:
		return roleFor
	case s.watches:
		return roleWatches
	}
	return roleOwns
}

func (s *source[T]) informerName() string {
	if s.inf == nil {
		return ""
	}
	return s.inf.Name()
}

func (s *source[T]) each(fn func(object.ObjectName, types.UID)) {
	if s.inf == nil {
		return
	}
	for _, obj := range s.inf.Reader().List("", nil) {
		fn(object.NameOf(obj), obj.GetUID())
	}
}

// uidOf returns the UID of the cached object called n.
func (s *source[T]) uidOf(n object.ObjectName) (types.UID, bool) {
	obj, ok := s.inf.Reader().Get(n)
	if !ok {
		return "", false
	}
	return obj.GetUID(), true
}

func (s *source[T]) cache() debug.Cache {
	if s.inf == nil {
		return nil
	}
	return s.inf
}

func (s *source[T]) kind(m *Manager) (schema.GroupVersionKind, error) {
	return m.kindOf(newObject[T]())
}

func (s *source[T]) register(m *Manager, c *Controller, primary schema.GroupVersionKind, p *partition, ryw bool) (*informer.Registration, error) {
	if s.inf == nil {
		return nil, errors.New("nil informer")
	}
	a := &reasonAdder{c: c, source: s.inf.Name()}
	h := s.toNames(a, primary)
	if p != nil && s.primary {
		p.uidOf = s.uidOf
		h = &forgetting[T]{next: h, p: p}
	}
	if len(s.filters) > 0 {
		h = handler.Filtering[T]{Filter: s.accept, Handler: h}
	}
	h = &noting[T]{next: h, a: a}
	if ryw {
		h = &observing[T]{next: h, m: m, inf: s.inf.Name()}
	}
	h = s.expectingKeys(h, c)
	reg, err := s.inf.AddEventHandler(h, informer.HandlerOptions{Name: c.Name()})
	if err != nil {
		return nil, err
	}
	c.WaitFor(s.inf.Name(), reg.HasSynced, s.inf.LastError)
	return reg, nil
}

func (s *source[T]) accept(obj T) bool {
	for _, f := range s.filters {
		if !f(obj) {
			return false
		}
	}
	return true
}

// NewController adds a controller to m: rec reconciles the names that the
// sources queue (exactly one For, any number of Owns and Watches); see
// ControllerOptions for opts. It fails on a nil reconciler, an empty or duplicate name, a
// missing or second For, a type outside the scheme, or after Run started;
// on failure nothing is left registered.
func NewController(m *Manager, name string, rec controller.Reconciler[object.ObjectName],
	opts ControllerOptions, sources ...Source) (*Controller, error) {
	if err := m.checkController(name, rec, sources); err != nil {
		return nil, err
	}
	primary, cache, err := primaryKind(m, sources)
	if err != nil {
		return nil, fmt.Errorf("manager: controller %s: %w", name, err)
	}
	co, part := m.controllerOptions(name, opts)
	c, err := controller.New(rec, co)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if opts.ReadYourWrites {
		m.ledger.OnRelease(func(owner object.ObjectName) {
			c.AddBecause(owner, controller.Reason{Event: "its writes are visible (read-your-writes)"})
		})
	}
	var regs []*informer.Registration
	undo := func() {
		for _, r := range regs {
			r.Remove()
		}
		c.Queue().ShutDown() // unregisters its metrics
	}
	for _, s := range sources {
		reg, err := s.register(m, c, primary, part, opts.ReadYourWrites)
		if err != nil {
			undo()
			return nil, fmt.Errorf("manager: controller %s: %w", name, err)
		}
		regs = append(regs, reg)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.once.Before("manager: controller " + name); err != nil {
		undo()
		return nil, err
	}
	e := controllerEntry{c: c, run: c.Run, primary: cache, sources: sources, every: opts.EveryReplica, ryw: opts.ReadYourWrites}
	for _, s := range sources {
		if s.isFor() {
			e.primaries = s.each
		}
	}
	m.controllers = append(m.controllers, e)
	return c, nil
}

// controllerOptions returns the options of the controller called name:
// opts.Options with the manager's defaults, and its partition of the ring
// (nil without sharding).
func (m *Manager) controllerOptions(name string, opts ControllerOptions) (controller.Options[object.ObjectName], *partition) {
	co := opts.Options
	co.Name = name
	co.Telemetry = co.Telemetry.Or(telemetry.Telemetry{Logger: m.opts.Logger.With("controller", name), Registerer: m.opts.Registry})
	co.ShutdownTimeout = cmp.Or(co.ShutdownTimeout, m.opts.ShutdownTimeout)
	co.CacheSyncTimeout = cmp.Or(co.CacheSyncTimeout, m.opts.CacheSyncTimeout)
	var part *partition
	if m.sharder != nil && !opts.EveryReplica && co.Partition == nil {
		part = &partition{m: m}
		co.Partition = part
	}
	if opts.ReadYourWrites && co.Gate == nil {
		co.Gate = m.ledger.Gate()
	}
	return co, part
}

// checkController validates NewController's arguments.
func (m *Manager) checkController(name string, rec controller.Reconciler[object.ObjectName], sources []Source) error {
	if name == "" {
		return errors.New("manager: a controller needs a name")
	}
	if rec == nil {
		return fmt.Errorf("manager: controller %s: %w", name, controller.ErrNilReconciler)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.once.Before("manager: controller " + name); err != nil {
		return err
	}
	for _, e := range m.controllers {
		if e.c.Name() == name {
			return fmt.Errorf("%w: %s", ErrDuplicateName, name)
		}
	}
	return nil
}

// primaryKind returns the kind and the informer of the one For source.
func primaryKind(m *Manager, sources []Source) (schema.GroupVersionKind, debug.Cache, error) {
	var fors []Source
	for _, s := range sources {
		if s == nil {
			return schema.GroupVersionKind{}, nil, errors.New("nil source")
		}
		if s.isFor() {
			fors = append(fors, s)
		}
	}
	if len(fors) != 1 {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("want exactly one For source, got %d", len(fors))
	}
	gvk, err := fors[0].kind(m)
	return gvk, fors[0].cache(), err
}

// forgetting remembers, for the partition, the UIDs of deleted primary
// objects whose keys may still be queued (the cache no longer has them).
type forgetting[T Object] struct {
	next handler.Handler[T]
	p    *partition
}

func (f *forgetting[T]) OnAdd(obj T, initial bool) { f.next.OnAdd(obj, initial) }
func (f *forgetting[T]) OnUpdate(old, new T)       { f.next.OnUpdate(old, new) }
func (f *forgetting[T]) OnDelete(d object.Deleted[T]) {
	if d.HasObj && d.Name.Validate() == nil {
		f.p.deleted(d.Name, d.Obj.GetUID())
	}
	f.next.OnDelete(d)
}

// observing tells the manager's ledger about every event of its informer
// before passing it on, so a key held for its writes is released as soon as
// the cache shows them. It rides on the controller's own handler: no extra
// listener per informer.
type observing[T Object] struct {
	next handler.Handler[T]
	m    *Manager
	inf  string // the informer's name, to find its resource
}

func (o *observing[T]) OnAdd(obj T, initial bool) {
	o.observe(object.NameOf(obj))
	o.next.OnAdd(obj, initial)
}

func (o *observing[T]) OnUpdate(old, new T) {
	o.observe(object.NameOf(new))
	o.next.OnUpdate(old, new)
}

func (o *observing[T]) OnDelete(d object.Deleted[T]) {
	if d.Name.Validate() == nil {
		o.observe(d.Name)
	}
	o.next.OnDelete(d)
}

func (o *observing[T]) observe(n object.ObjectName) {
	if o.m.ledger.Pending() == 0 {
		return
	}
	if gr, ok := o.m.resourceOf(o.inf); ok {
		o.m.ledger.Observe(gr, n)
	}
}

// reasonAdder queues a source's keys in its controller with the event being
// delivered as the reason (see controller.KeyStats and /debug/ctrlkit).
// event is set by noting; both are used by the one goroutine that delivers
// the source's events, so event needs no lock.
type reasonAdder struct {
	c      *Controller
	source string // the informer's name
	event  string
}

func (a *reasonAdder) Add(k object.ObjectName) {
	a.c.AddBecause(k, controller.Reason{Event: a.event, Source: a.source})
}

// expecting is the handler of a controller's primary objects when no
// filter drops any: each of them is a key of the controller's, so the size
// of a list into an empty cache is how many keys are coming
// (handler.KeyExpecter), and the controller's queue makes room for them at
// once. It hides every optional interface of the handler it wraps but
// KeyExpecter; none of the wrappers below it has one.
type expecting[T Object] struct {
	handler.Handler[T]
	c *Controller
}

func (e expecting[T]) ExpectKeys(n int) { e.c.Reserve(n) }

// expectingKeys returns h as an expecting handler when s is a For source
// without filters, else h.
func (s *source[T]) expectingKeys(h handler.Handler[T], c *Controller) handler.Handler[T] {
	if s.primary && len(s.filters) == 0 {
		return expecting[T]{Handler: h, c: c}
	}
	return h
}

// noting records which event it passes on, for its reasonAdder.
type noting[T Object] struct {
	next handler.Handler[T]
	a    *reasonAdder
}

func (n *noting[T]) OnAdd(obj T, initial bool) {
	n.a.event = "add"
	if initial {
		n.a.event = "initial list"
	}
	n.next.OnAdd(obj, initial)
}

func (n *noting[T]) OnUpdate(old, new T) {
	n.a.event = "update"
	if any(old) == any(new) {
		n.a.event = "resync"
	}
	n.next.OnUpdate(old, new)
}

func (n *noting[T]) OnDelete(d object.Deleted[T]) {
	n.a.event = "delete"
	n.next.OnDelete(d)
}
