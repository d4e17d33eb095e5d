package manager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
)

// Namespaces is the cache of one type over a set of namespaces that may
// change while the manager runs: one shared informer per namespace (the
// API lists and watches one namespace or all), read as one cache and used
// as one source of a controller (Namespaces.For, Owns, Watches). Adding a
// namespace lists and watches that namespace only; the others are not
// relisted. Removing one stops its informer (unless another controller or
// reader holds it) and takes its objects out of the set; the set's
// controllers hear each of them as deleted (Remove: for controllers that
// clean up after objects leaving their scope) or nothing (Forget: leaving
// the scope needs no work). Add, Remove and Forget may be called from a
// reconcile (a set driven by a label of the namespaces, reconciled as a
// controller's For objects: see
// ExampleInNamespaces_drivenByANamespaceLabel), never from a source's
// filter or map function or an informer's handler, which run on the
// informers' goroutines (Remove and Forget there wait for those very
// goroutines, forever). Make one with InNamespaces; safe for concurrent
// use.
type Namespaces[T Object] struct {
	m     *Manager
	gvk   schema.GroupVersionKind
	scope Scope // Namespace unused
	name  string

	// mu guards the fields below. Lock order: mu, then Manager.mu; an
	// informer is released with mu not held (a release waits for it to stop).
	mu       sync.Mutex
	members  map[string]*informer.SharedIndexInformer[T] // by namespace
	handlers []*setHandler[T]
	closed   bool // the last reference was released
}

// setHandler is one controller source's handler on every member of a set.
type setHandler[T Object] struct {
	controller string
	make       func(inf *informer.SharedIndexInformer[T]) *sourceKeys[T]
	on         map[string]setMember[T] // by namespace
	synced     atomic.Bool             // latched: a namespace added later does not make it unsynced
}

// setMember is a set handler on one member informer.
type setMember[T Object] struct {
	keys *sourceKeys[T]
	reg  *informer.Registration
}

// ErrShardedScope is the error of changing a Namespaces set while a
// sharded manager runs: a sharded manager decides how each informer is cut
// by shard when Run starts.
var ErrShardedScope = errors.New("manager: a sharded manager's namespace sets are fixed once Run started")

// setSeq numbers sets, for their names.
var setSeq atomic.Int64

// InNamespaces returns a set of T's informers in scope, one per namespace
// of namespaces (scope.Namespace must be empty), taking one reference to
// it that ReleaseInformer gives back. Add and Remove change its namespaces
// at any time, before or while the manager runs. It fails on a type
// outside the scheme, a scope with a namespace, or an invalid namespace
// name. Manifests grants get, list and watch on T in every namespace (the
// set's are known only while the program runs); narrow it by hand to
// Roles of fixed namespaces if they are. The start's preflight checks
// list and watch in the namespaces the set holds then.
func InNamespaces[T Object](m *Manager, scope Scope, namespaces ...string) (*Namespaces[T], error) {
	gvk, err := m.kindOf(newObject[T]())
	if err != nil {
		return nil, fmt.Errorf("manager: InNamespaces: %w", err)
	}
	if scope.Namespace != "" {
		return nil, fmt.Errorf("manager: InNamespaces: scope has namespace %q: the set says which", scope.Namespace)
	}
	if _, err := labels.Parse(scope.LabelSelector); err != nil {
		return nil, fmt.Errorf("manager: InNamespaces: label selector %q: %w", scope.LabelSelector, err)
	}
	key := informer.Scope{LabelSelector: scope.LabelSelector, FieldSelector: scope.FieldSelector}
	key.Resource = m.plurals().resource(gvk)
	s := &Namespaces[T]{m: m, gvk: gvk, scope: scope, members: map[string]*informer.SharedIndexInformer[T]{},
		name: fmt.Sprintf("%s in namespace set %d", key, setSeq.Add(1))}
	m.mu.Lock()
	m.refs[s.name] = 1
	m.sets[s.name] = s
	m.mu.Unlock()
	if err := s.Add(namespaces...); err != nil {
		_ = m.ReleaseInformer(s)
		return nil, err
	}
	return s, nil
}

// Name names the set in its errors and log lines, e.g. "configmaps/v1 in
// namespace set 1". /readyz, the debug page and the informer metrics name
// each of its namespaces' informers instead ("configmaps/v1 in namespace
// team-a").
func (s *Namespaces[T]) Name() string { return s.name }

// Namespaces returns the set's namespaces, sorted.
func (s *Namespaces[T]) Namespaces() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.members))
}

// Add adds namespaces to the set: each gets an informer (shared with any
// other of T in that namespace and scope), started at once if the manager
// runs, and the set's controllers hear its objects as added. Its objects
// are missing from Get and List until its informer has listed them
// (Synced). A namespace already in the set is left alone. It fails on an
// invalid namespace name,
// after the set's last release (ErrNoInformer), and while a sharded
// manager runs (ErrShardedScope); namespaces added before the failing one
// stay.
func (s *Namespaces[T]) Add(namespaces ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.changeable(); err != nil {
		return err
	}
	for _, ns := range namespaces {
		if _, ok := s.members[ns]; ok {
			continue
		}
		if errs := validation.ValidateNamespaceName(ns, false); len(errs) > 0 {
			return fmt.Errorf("manager: %s: namespace %q: %s", s.name, ns, errs[0])
		}
		scope := s.scope
		scope.Namespace = ns
		inf, err := sharedInformer(s.m, s.gvk, scope, "", func(opts listwatch.KindOptions) (*listwatch.KindListerWatcher[T], error) {
			return listwatch.Kind[T](s.m.discovery, s.gvk, opts), nil
		})
		if err != nil {
			return err
		}
		s.members[ns] = inf
		for _, h := range s.handlers {
			if err := h.attach(ns, inf); err != nil {
				return fmt.Errorf("manager: %s: namespace %s: %w", s.name, ns, err)
			}
		}
	}
	return nil
}

// Remove takes namespaces out of the set: the set's controllers hear each
// of their cached objects as deleted (a delete whose FinalStateUnknown is
// true: the object was not seen deleted, only dropped from the scope), and
// their informers are released (stopped, unless held elsewhere). A
// namespace not in the set is ignored. It fails as Add does.
func (s *Namespaces[T]) Remove(namespaces ...string) error { return s.remove(true, namespaces) }

// Forget is Remove without the deletes: the objects leave the set's cache
// and its controllers hear nothing of them.
func (s *Namespaces[T]) Forget(namespaces ...string) error { return s.remove(false, namespaces) }

func (s *Namespaces[T]) remove(deletes bool, namespaces []string) error {
	s.mu.Lock()
	if err := s.changeable(); err != nil {
		s.mu.Unlock()
		return err
	}
	var gone []*informer.SharedIndexInformer[T]
	for _, ns := range namespaces {
		inf, ok := s.members[ns]
		if !ok {
			continue
		}
		delete(s.members, ns)
		for _, h := range s.handlers {
			h.detach(ns, inf, deletes)
		}
		gone = append(gone, inf)
	}
	s.mu.Unlock()
	return s.release(gone) // not under s.mu: a release waits for the informer to stop
}

// release gives back the set's references to infs.
func (s *Namespaces[T]) release(infs []*informer.SharedIndexInformer[T]) error {
	var errs []error
	for _, inf := range infs {
		if err := s.m.ReleaseInformer(inf); err != nil {
			errs = append(errs, fmt.Errorf("manager: %s: %s: %w", s.name, inf.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// changeable says why the set cannot change now, if it cannot; s.mu is
// held.
func (s *Namespaces[T]) changeable() error {
	if s.closed {
		return fmt.Errorf("manager: %s: %w", s.name, ErrNoInformer)
	}
	if s.m.sharder != nil && s.m.once.Started() {
		return fmt.Errorf("%w (%s)", ErrShardedScope, s.name)
	}
	return nil
}

// close releases every member, at the set's last release.
func (s *Namespaces[T]) close() {
	s.mu.Lock()
	s.closed = true
	gone := make([]*informer.SharedIndexInformer[T], 0, len(s.members))
	for ns, inf := range s.members {
		for _, h := range s.handlers {
			h.detach(ns, inf, false)
		}
		gone = append(gone, inf)
	}
	clear(s.members)
	s.handlers = nil
	s.mu.Unlock()
	_ = s.release(gone)
}

// memberNames returns the names of the members' informers.
func (s *Namespaces[T]) memberNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.members))
	for _, inf := range s.members {
		names = append(names, inf.Name())
	}
	return names
}

// member returns the informer of namespace ns.
func (s *Namespaces[T]) member(ns string) (*informer.SharedIndexInformer[T], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inf, ok := s.members[ns]
	return inf, ok
}

// Get returns the cached object called name, if its namespace is in the
// set.
func (s *Namespaces[T]) Get(name object.ObjectName) (T, bool) {
	inf, ok := s.member(name.Namespace)
	if !ok {
		var zero T
		return zero, false
	}
	return inf.Reader().Get(name)
}

// List returns the cached objects in namespace ("": every namespace of the
// set) that selector (nil: everything) matches. The objects are shared
// with the cache: read them, never modify them.
func (s *Namespaces[T]) List(namespace string, selector labels.Selector) []T {
	s.mu.Lock()
	members := slices.Collect(maps.Values(s.members))
	s.mu.Unlock()
	var out []T
	for _, inf := range members {
		out = append(out, inf.Reader().List(namespace, selector)...)
	}
	return out
}

// CachedVersion returns the resource version of the cached object called
// name (for the debug page's explanation of a key).
func (s *Namespaces[T]) CachedVersion(name object.ObjectName) (string, bool) {
	inf, ok := s.member(name.Namespace)
	if !ok {
		return "", false
	}
	return inf.CachedVersion(name)
}

// Synced reports whether namespace is in the set and its informer has
// listed its objects once. Until then Get and List miss them, and an
// apply.Apply reading the set writes as if nothing were cached: a
// reconcile that has just added a namespace requeues (RequeueAfter) until
// it is synced, without waiting for the set's other namespaces (HasSynced).
func (s *Namespaces[T]) Synced(namespace string) bool {
	s.mu.Lock()
	inf := s.members[namespace]
	s.mu.Unlock()
	return inf != nil && inf.HasSynced()
}

// HasSynced reports that every member's informer has synced.
func (s *Namespaces[T]) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inf := range s.members {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// lastError returns a member's last error, if any has one.
func (s *Namespaces[T]) lastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inf := range s.members {
		if err := inf.LastError(); err != nil {
			return err
		}
	}
	return nil
}

// For, Owns and Watches make the set a controller's source, as the
// functions of those names do for one informer (see For).
func (s *Namespaces[T]) For(filters ...func(T) bool) Source {
	src := forSource(filters)
	src.set = s
	return src
}

// Owns: see For.
func (s *Namespaces[T]) Owns(filters ...func(T) bool) Source {
	src := ownsSource(filters)
	src.set = s
	return src
}

// Watches: see For.
func (s *Namespaces[T]) Watches(mapFn func(T) []object.ObjectName, filters ...func(T) bool) Source {
	src := watchesSource(mapFn, filters)
	src.set = s
	return src
}

// register adds a controller's handler, made for each member by mk, to
// every member now and later; it returns what removes it, and what tells
// whether it has synced.
func (s *Namespaces[T]) register(controller string, mk func(*informer.SharedIndexInformer[T]) *sourceKeys[T]) (func(), func() bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, fmt.Errorf("manager: %s: %w", s.name, ErrNoInformer)
	}
	h := &setHandler[T]{controller: controller, make: mk, on: map[string]setMember[T]{}}
	for ns, inf := range s.members {
		if err := h.attach(ns, inf); err != nil {
			for ns, inf := range s.members {
				h.detach(ns, inf, false)
			}
			return nil, nil, err
		}
	}
	s.handlers = append(s.handlers, h)
	remove := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.handlers = slices.DeleteFunc(s.handlers, func(o *setHandler[T]) bool { return o == h })
		for ns, inf := range s.members {
			h.detach(ns, inf, false)
		}
	}
	synced := func() bool {
		if h.synced.Load() {
			return true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, on := range h.on {
			if !on.reg.HasSynced() {
				return false
			}
		}
		h.synced.Store(true)
		return true
	}
	return remove, synced, nil
}

// attach adds h to the member informer of namespace ns.
func (h *setHandler[T]) attach(ns string, inf *informer.SharedIndexInformer[T]) error {
	k := h.make(inf)
	reg, err := inf.AddEventHandler(k, informer.HandlerOptions{Name: h.controller})
	if err != nil {
		return err
	}
	h.on[ns] = setMember[T]{keys: k, reg: reg}
	return nil
}

// detach takes h off the member informer of namespace ns and, with
// deletes, hands it a delete of each of that member's cached objects.
func (h *setHandler[T]) detach(ns string, inf *informer.SharedIndexInformer[T], deletes bool) {
	on, ok := h.on[ns]
	if !ok {
		return
	}
	delete(h.on, ns)
	on.reg.Remove()
	if !deletes {
		return
	}
	objs := inf.Reader().List("", nil)
	events := make([]handler.Event[T], 0, len(objs))
	for _, obj := range objs {
		events = append(events, handler.Event[T]{Type: handler.DeleteEvent,
			Deleted: object.Deleted[T]{Name: object.NameOf(obj), Obj: obj, HasObj: true, FinalStateUnknown: true}})
	}
	on.keys.Enqueue(events)
}

// kind is the set's kind, for the manifests' grants.
func (s *Namespaces[T]) kind() schema.GroupVersionKind { return s.gvk }

// namespaces returns the namespaces the set holds, sorted.
func (s *Namespaces[T]) namespaces() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.members))
}
