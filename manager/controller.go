package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/tracing"
	"github.com/ctrlkit/ctrlkit/workqueue"
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
	life      *controllerLife
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
	register(m *Manager, c *Controller, primary schema.GroupVersionKind, p *partition, ryw bool) (func(), error)
	isFor() bool
	role() int
	informerName() string
	// setNamespaces returns, for a source over a set of namespaces
	// (Namespaces), the set's namespaces now, and true.
	setNamespaces() ([]string, bool)
	// each calls fn with every cached object's name and UID.
	each(fn func(object.ObjectName, types.UID))
	kind(m *Manager) (schema.GroupVersionKind, error)
	cache() debug.Cache
}

// source is the one implementation of Source: over one informer, or a
// set of them (Namespaces).
type source[T Object] struct {
	inf     *informer.SharedIndexInformer[T]
	set     *Namespaces[T] // instead of inf
	filters []func(T) bool
	primary bool
	watches bool // a Watches source
	// names returns how an event names primary objects, given the
	// primary kind.
	names func(primary schema.GroupVersionKind) handler.KeyFunc[T, object.ObjectName]
}

// For makes the objects of inf the controller's primary objects: each
// change queues the object's own name (handler.Names). filters, if any,
// must all accept an object for it to count (see handler.Event.Filtered:
// an object that stops passing is seen as deleted). A controller has
// exactly one For.
//
// Every source's events take one path into the controller's queue (a
// handler.Enqueuer): its informer hands them over a batch at a time, on
// its own goroutine, under its lock, and filters and map functions run
// there. They must not block, nor call any informer's or Registration's
// methods (HasSynced included): read caches through their Readers, never
// call the API server.
func For[T Object](inf *informer.SharedIndexInformer[T], filters ...func(T) bool) Source {
	s := forSource(filters)
	s.inf = inf
	return s
}

func forSource[T Object](filters []func(T) bool) *source[T] {
	return &source[T]{filters: filters, primary: true,
		names: func(schema.GroupVersionKind) handler.KeyFunc[T, object.ObjectName] { return handler.Names[T]() }}
}

// Owns makes changes to the objects of inf queue the primary object that
// controls them (the owner reference with controller: true whose group and
// kind are the For type's, any version; see handler.Owners), so an owned
// object changed or deleted by someone else is put right. Only objects in
// inf's scope are seen: an owned object outside its namespace or label
// selector changes nothing (controller-runtime's Owns sees every object of
// the type).
func Owns[T Object](inf *informer.SharedIndexInformer[T], filters ...func(T) bool) Source {
	s := ownsSource(filters)
	s.inf = inf
	return s
}

func ownsSource[T Object](filters []func(T) bool) *source[T] {
	return &source[T]{filters: filters,
		names: func(primary schema.GroupVersionKind) handler.KeyFunc[T, object.ObjectName] {
			return handler.Owners[T](primary.GroupKind())
		}}
}

// Watches makes changes to the objects of inf queue the names mapFn returns
// (see handler.Mapped), e.g. every primary object that refers to a
// changed ConfigMap. mapFn runs on the informer's goroutine: it must not
// block. A mapFn that reads another cache (a Pod's ReplicaSet, to find its
// Deployment) can run before that cache holds the object it looks for
// (informers fill in no set order); it then maps to nothing, and nothing
// maps that event again. Make the other informer a source too (Owns, or
// Watches mapping its objects), so that its own event, once it is cached,
// queues the key.
func Watches[T Object](inf *informer.SharedIndexInformer[T], mapFn func(T) []object.ObjectName, filters ...func(T) bool) Source {
	s := watchesSource(mapFn, filters)
	s.inf = inf
	return s
}

func watchesSource[T Object](mapFn func(T) []object.ObjectName, filters []func(T) bool) *source[T] {
	return &source[T]{filters: filters, watches: true,
		names: func(schema.GroupVersionKind) handler.KeyFunc[T, object.ObjectName] { return handler.Mapped(mapFn) }}
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
	switch {
	case s.set != nil:
		return s.set.Name()
	case s.inf != nil:
		return s.inf.Name()
	}
	return ""
}

func (s *source[T]) setNamespaces() ([]string, bool) {
	if s.set == nil {
		return nil, false
	}
	return s.set.Namespaces(), true
}

func (s *source[T]) each(fn func(object.ObjectName, types.UID)) {
	var objs []T
	switch {
	case s.set != nil:
		objs = s.set.List("", nil)
	case s.inf != nil:
		objs = s.inf.Reader().List("", nil)
	}
	for _, obj := range objs {
		fn(object.NameOf(obj), obj.GetUID())
	}
}

// uidOf returns the UID of the cached object called n.
func (s *source[T]) uidOf(n object.ObjectName) (types.UID, bool) {
	var obj T
	var ok bool
	if s.set != nil {
		obj, ok = s.set.Get(n)
	} else {
		obj, ok = s.inf.Reader().Get(n)
	}
	if !ok {
		return "", false
	}
	return obj.GetUID(), true
}

func (s *source[T]) cache() debug.Cache {
	switch {
	case s.set != nil:
		return s.set
	case s.inf != nil:
		return s.inf
	}
	return nil
}

func (s *source[T]) kind(m *Manager) (schema.GroupVersionKind, error) {
	return m.kindOf(newObject[T]())
}

// register adds the source's handler to its informer (or every informer
// of its set) and makes c wait for it; it returns what removes it.
func (s *source[T]) register(m *Manager, c *Controller, primary schema.GroupVersionKind, p *partition, ryw bool) (func(), error) {
	mk := func(inf *informer.SharedIndexInformer[T]) *sourceKeys[T] {
		k := s.keysInto(c, primary, p, inf.Name())
		if ryw || m.tracer != nil {
			k.m = m
		}
		k.ryw = ryw
		return k
	}
	if s.set != nil {
		remove, synced, err := s.set.register(c.Name(), mk)
		if err != nil {
			return nil, err
		}
		c.WaitFor(s.set.Name(), synced, s.set.lastError)
		return remove, nil
	}
	if s.inf == nil {
		return nil, errors.New("nil informer")
	}
	reg, err := s.inf.AddEventHandler(mk(s.inf), informer.HandlerOptions{Name: c.Name()})
	if err != nil {
		return nil, err
	}
	c.WaitForSynced(s.inf.Name(), reg.Synced(), s.inf.LastError)
	return reg.Remove, nil
}

// keysInto returns the source's handler into c from the informer called
// informer, without read-your-writes; p is the controller's partition (nil
// without sharding).
func (s *source[T]) keysInto(c *Controller, primary schema.GroupVersionKind, p *partition, informer string) *sourceKeys[T] {
	k := &sourceKeys[T]{c: c, source: informer, names: s.names(primary),
		expect: s.primary && len(s.filters) == 0, handler: [...]string{roleFor: "For", roleOwns: "Owns", roleWatches: "Watches"}[s.role()]}
	if len(s.filters) > 0 {
		k.accept = s.accept
	}
	if p != nil && s.primary {
		p.uidOf = s.uidOf
		k.part = p
	}
	return k
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
// ControllerOptions for opts. Added while m runs, the controller starts at
// once (with leader election, while this replica leads, unless
// EveryReplica): its informers start if they are new, its workers once
// they synced; until then it does not make the replica unready.
// RemoveController stops it. It fails on a nil reconciler, an empty or
// duplicate name, a missing or second For, a type outside the scheme, once
// Run is ending (ErrStopping), and while a sharded manager runs
// (ErrShardedLate); on failure nothing is left registered.
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
	life := &controllerLife{}
	if opts.ReadYourWrites {
		life.unrelease = m.ledger.OnRelease(func(owner object.ObjectName) {
			c.AddBecause(owner, controller.Reason{Event: "its writes are visible (read-your-writes)"})
		})
	}
	undo := func() {
		for _, remove := range life.regs {
			remove()
		}
		if life.unrelease != nil {
			life.unrelease()
		}
		c.Close() // its queue, and its metrics and the queue's
	}
	for _, s := range sources {
		reg, err := s.register(m, c, primary, part, opts.ReadYourWrites)
		if err != nil {
			undo()
			return nil, fmt.Errorf("manager: controller %s: %w", name, err)
		}
		life.regs = append(life.regs, reg)
	}
	e := controllerEntry{c: c, run: c.Run, primary: cache, sources: sources, every: opts.EveryReplica, ryw: opts.ReadYourWrites,
		life: life}
	for _, s := range sources {
		if s.isFor() {
			e.primaries = s.each
		}
	}
	if err := m.addController(e); err != nil {
		undo() // not under m.mu: a set's handlers take its lock, which comes first
		return nil, fmt.Errorf("manager: controller %s: %w", name, err)
	}
	return c, nil
}

// addController adds e, unless its name is taken (another NewController
// of that name won the race) or the manager is stopping, and takes its
// references to its sources' informers.
func (m *Manager) addController(e controllerEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.nameFreeLocked(e.c.Name()); err != nil {
		return err
	}
	if m.once.Started() {
		if err := m.addLateLocked(e); err != nil {
			return err
		}
	} else {
		m.controllers = append(m.controllers, e)
	}
	m.holdLocked(e.sources)
	return nil
}

// controllerOptions returns the options of the controller called name:
// opts.Options with the manager's defaults, and its partition of the ring
// (nil without sharding).
func (m *Manager) controllerOptions(name string, opts ControllerOptions) (controller.Options[object.ObjectName], *partition) {
	co := opts.Options
	co.Name = name
	// The controller adds controller=NAME to its logger's lines itself.
	co.Telemetry = co.Telemetry.Or(telemetry.Telemetry{Logger: m.opts.Logger, Registerer: m.opts.Registry})
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
	if co.Tracer == nil {
		co.Tracer = m.tracer
	}
	co.LinkTraceparents = co.LinkTraceparents || m.opts.LinkTraceparents
	if co.TraceSampling == 0 {
		co.TraceSampling = m.opts.TraceSampling
	}
	if co.Writes == nil {
		co.Writes = m.writes
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
	switch {
	case m.stopping:
		return fmt.Errorf("manager: controller %s: %w", name, ErrStopping)
	case m.once.Started() && m.sharder != nil:
		return fmt.Errorf("manager: controller %s: %w", name, ErrShardedLate)
	}
	return m.nameFreeLocked(name)
}

// nameFreeLocked fails with ErrDuplicateName if a controller of m is
// called name; m.mu is held.
func (m *Manager) nameFreeLocked(name string) error {
	for _, e := range m.controllers {
		if e.c.Name() == name {
			return fmt.Errorf("%w: %s", ErrDuplicateName, name)
		}
	}
	for _, f := range m.fleets {
		if f.Controller().Name() == name {
			return fmt.Errorf("%w: %s (a fleet's)", ErrDuplicateName, name)
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

// sourceKeys is a source's handler: the one path of its informer's events
// into the controller's queue (a handler.Enqueuer), in stages run for each
// event of a batch, with no allocation per event:
//
//   - the read-your-writes ledger hears of every event (m set), so a key
//     held for its writes is released as soon as the cache shows them;
//   - the source's filters (accept set) turn the event into what a handler
//     behind them sees (handler.Event.Filtered), or drop it;
//   - a deleted primary object's UID is kept for the partition (part set),
//     since its key may still be queued when the cache no longer has it;
//   - names says which primary objects the event queues, each with the
//     informer's event as its reason (see controller.KeyStats and
//     /debug/ctrlkit), added in one batch per run of equal background
//     (handler.Event.Background: low priority).
type sourceKeys[T Object] struct {
	c      *Controller
	source string // the informer's name
	names  handler.KeyFunc[T, object.ObjectName]
	accept func(T) bool // nil: every object
	m      *Manager     // with read-your-writes or a tracer
	ryw    bool         // read-your-writes: the ledger observes the events
	part   *partition   // for a For source, with sharding
	// expect passes the informer's hint of a list's size to the queue: a
	// For source without filters, each object being one key.
	expect bool
	// handler is the source's kind ("For", "Owns", "Watches"), for the
	// links of traced reconciles.
	handler string

	// mu guards the scratch space below, kept from batch to batch (one
	// informer calls Enqueue from one goroutine at a time).
	mu     sync.Mutex
	keys   []object.ObjectName
	why    []controller.Reason
	causes []controller.Cause // with a tracer only
	passed handler.Event[T]
	// resource is the informer's resource, for the ledger, once known.
	resource schema.GroupResource
	known    bool
}

// Enqueue queues the names of events' objects, in order.
func (s *sourceKeys[T]) Enqueue(events []handler.Event[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, why, bg := s.keys[:0], s.why[:0], false
	tracing := s.c.Tracing()
	for i := range events {
		e := &events[i]
		if s.ryw {
			s.observe(e)
		}
		if s.accept != nil {
			var ok bool
			if s.passed, ok = e.Filtered(s.accept); !ok {
				continue
			}
			e = &s.passed
		}
		if s.part != nil && e.Type == handler.DeleteEvent && e.Deleted.HasObj && e.Deleted.Name.Validate() == nil {
			s.part.deleted(e.Deleted.Name, e.Deleted.Obj.GetUID())
		}
		if b := e.Background(); b != bg {
			keys, why = s.flush(keys, why, bg)
			bg = b
		}
		n := len(keys)
		keys = s.names(keys, e)
		r := controller.Reason{Event: eventName(&events[i]), Source: s.source}
		for range keys[n:] {
			why = append(why, r)
		}
		if tracing && len(keys) > n {
			s.causes = s.cause(s.causes, &events[i], n, len(keys)-n)
		}
	}
	s.keys, s.why = s.flush(keys, why, bg)
	s.passed = handler.Event[T]{}
}

// flush adds keys to the controller, with their reasons, at low priority
// if they are background work, and returns the emptied slices.
func (s *sourceKeys[T]) flush(keys []object.ObjectName, why []controller.Reason, bg bool) ([]object.ObjectName, []controller.Reason) {
	if len(keys) == 0 {
		return keys, why
	}
	prio := 0
	if bg {
		prio = workqueue.LowPriority
	}
	if s.c.Tracing() { // the source drew its events (cause): none drawn is no causes
		s.c.AddBatchCaused(keys, why, s.causes, prio)
		clear(s.causes)
		s.causes = s.causes[:0]
	} else {
		s.c.AddBatchBecause(keys, why, prio)
	}
	clear(keys) // hold no name of a deleted object
	return keys[:0], why[:0]
}

// cause appends n copies of the cause of e (its object, version and
// traceparent) to causes, for a traced controller, if e is drawn for
// tracing (Controller.Drawn) or its object's traceparent is sampled; else
// n zero causes, which link nothing. causes stays empty until an event of
// the batch is drawn: it is then filled up to before, the keys already in
// the batch.
func (s *sourceKeys[T]) cause(causes []controller.Cause, e *handler.Event[T], before, n int) []controller.Cause {
	obj, ok := e.Obj, e.Type != handler.DeleteEvent
	if !ok {
		obj, ok = e.Deleted.Obj, e.Deleted.HasObj
	}
	var parent trace.SpanContext
	if ok {
		parent, _ = tracing.FromObject(obj)
	}
	var c controller.Cause
	if s.c.Drawn() || parent.IsSampled() && s.c.JoinsTraceparents() {
		c = controller.Cause{Handler: s.handler, Traceparent: parent}
		if s.m != nil && s.knownResource() {
			c.Resource = s.resource
		}
		if ok {
			c.Object, c.ResourceVersion = object.NameOf(obj), obj.GetResourceVersion()
			if e.Type == handler.DeleteEvent {
				c.DeletedUID = object.UIDOf(obj)
			}
		} else {
			c.Object = e.Deleted.Name
		}
		for len(causes) < before {
			causes = append(causes, controller.Cause{})
		}
	} else if len(causes) == 0 {
		return causes
	}
	for range n {
		causes = append(causes, c)
	}
	return causes
}

// knownResource reports whether s.resource is known (the informer has
// listed), looking it up if not yet.
func (s *sourceKeys[T]) knownResource() bool {
	if !s.known {
		s.resource, s.known = s.m.resourceOf(s.source)
	}
	return s.known
}

// eventName is the reason an event gives, as the informer delivered it.
func eventName[T Object](e *handler.Event[T]) string {
	switch e.Type {
	case handler.AddEvent:
		if e.Initial {
			return "initial list"
		}
		return "add"
	case handler.UpdateEvent:
		if any(e.Old) == any(e.Obj) {
			return "resync"
		}
		return "update"
	}
	return "delete"
}

// observe tells the manager's ledger about e's object.
func (s *sourceKeys[T]) observe(e *handler.Event[T]) {
	if s.m.ledger.Pending() == 0 {
		return
	}
	var n object.ObjectName
	switch {
	case e.Type != handler.DeleteEvent:
		n = object.NameOf(e.Obj)
	case e.Deleted.Name.Validate() == nil:
		n = e.Deleted.Name
	default:
		return
	}
	if !s.knownResource() {
		return // not mapped yet: the informer has not listed
	}
	s.m.ledger.Observe(s.resource, n)
}

// ExpectKeys makes room in the controller's queue for n keys, for a For
// source without filters.
func (s *sourceKeys[T]) ExpectKeys(n int) {
	if s.expect {
		s.c.Reserve(n)
	}
}

// OnAdd, OnUpdate and OnDelete take one event down the same path; an
// informer never calls them (it calls Enqueue).
func (s *sourceKeys[T]) OnAdd(obj T, initial bool) {
	s.Enqueue([]handler.Event[T]{{Type: handler.AddEvent, Obj: obj, Initial: initial}})
}

func (s *sourceKeys[T]) OnUpdate(old, new T) {
	s.Enqueue([]handler.Event[T]{{Type: handler.UpdateEvent, Old: old, Obj: new}})
}

func (s *sourceKeys[T]) OnDelete(d object.Deleted[T]) {
	s.Enqueue([]handler.Event[T]{{Type: handler.DeleteEvent, Deleted: d}})
}
