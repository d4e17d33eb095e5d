package fleet

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// Scope selects what a source lists and watches in each cluster. The zero
// value is every object of the type.
type Scope struct {
	Namespace                    string
	LabelSelector, FieldSelector string
}

// Cache is a source's informers, one per engaged cluster: read a cluster's
// objects with Reader.
type Cache[T object.Object] struct {
	f     *Fleet
	index int // the source's place in f.sources
}

// source is one of the fleet's sources, type-erased: what Engage builds
// in each cluster.
type source struct {
	gvk     schema.GroupVersionKind
	name    string // its informers', after "<cluster>: " (see sourceName)
	role    int
	removed bool // by Cache.Remove: its informers stopped, none built
	build   func(f *Fleet, m *member) (*sourceRun, error)
}

// ErrSecondFor is For's error when the fleet has its For source already:
// a fleet reconciles one kind (more objects of it in other namespaces or
// selectors come through Watches).
var ErrSecondFor = errors.New("fleet: a fleet has one For source")

// ErrNoFor is Owns's error before For: the owner's kind is For's.
var ErrNoFor = errors.New("fleet: Owns needs the fleet's For source first (the owners' kind)")

// ErrRemoveFor is Cache.Remove's error for the For source: the fleet's
// keys are of its kind for the fleet's life.
var ErrRemoveFor = errors.New("fleet: the For source cannot be removed (its kind is the fleet's keys')")

// For makes the objects of T in scope, in every cluster, the fleet's
// primary objects: each change queues Key{Cluster, the object's name}. T
// must be in the fleet's scheme. A fleet has one For; it may come after
// clusters are engaged and while the fleet runs, as Owns and Watches may
// (each engaged cluster then starts the source's informer).
func For[T object.Object](f *Fleet, scope Scope) (*Cache[T], error) {
	return add[T](f, scope, func(schema.GroupKind) handler.KeyFunc[T, object.ObjectName] { return handler.Names[T]() }, sourceFor)
}

// Owns makes changes to the objects of T in scope, in every cluster, queue
// the For object of that cluster that controls them (the owner reference
// with controller: true of For's kind; see handler.Owners), so a child
// changed or deleted by someone else is put right. Call it after For; it
// may come while the fleet runs.
func Owns[T handler.Owned](f *Fleet, scope Scope) (*Cache[T], error) {
	return add[T](f, scope, handler.Owners[T], sourceOwns)
}

// Watches makes changes to the objects of T in scope, in every cluster,
// queue the keys fn maps them to in the same cluster (see handler.Mapped:
// an update maps the old and the new object, a delete the last known one).
// It needs no For, and may come while the fleet runs: Watches and
// Cache.Remove are a fleet's scope changing at runtime.
func Watches[T object.Object](f *Fleet, scope Scope, fn func(obj T) []object.ObjectName) (*Cache[T], error) {
	if fn == nil {
		return nil, errors.New("fleet: Watches needs a map function")
	}
	return add[T](f, scope, func(schema.GroupKind) handler.KeyFunc[T, object.ObjectName] { return handler.Mapped(fn) }, sourceMapped)
}

// The roles of a source.
const (
	sourceFor = iota
	sourceOwns
	sourceMapped
)

// add registers a source of T in role whose events name keys as names
// does, given the For kind.
func add[T object.Object](f *Fleet, scope Scope, names func(owner schema.GroupKind) handler.KeyFunc[T, object.ObjectName],
	role int) (*Cache[T], error) {
	gvk, err := kindOf[T](f.opts.Scheme)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return nil, ErrStopped
	case role == sourceFor && !f.primary.Empty():
		f.mu.Unlock()
		return nil, ErrSecondFor
	case role == sourceOwns && f.primary.Empty():
		f.mu.Unlock()
		return nil, ErrNoFor
	case role == sourceFor:
		f.primary = gvk.GroupKind()
	}
	keys := names(f.primary)
	owner := f.primary
	name := sourceName(f.sources, gvk, role, scope)
	index := len(f.sources)
	f.sources = append(f.sources, source{gvk: gvk, name: name, role: role, build: func(f *Fleet, m *member) (*sourceRun, error) {
		return build[T](f, m, gvk, name, scope, keys, role, owner)
	}})
	members, sources := f.membersLocked(), slices.Clone(f.sources)
	f.mu.Unlock()
	// The clusters engaged already start the source's informer; those
	// engaged from here on build it with the others.
	var errs []error
	for _, m := range members {
		if err := m.follow(f, sources)[index]; err != nil {
			errs = append(errs, err)
		} // another source's failure is its own add's to report
	}
	if len(errs) > 0 {
		f.removeSource(index, true)
		return nil, errors.Join(errs...)
	}
	if role == sourceOwns {
		// The For whose kind this Owns maps to may have been rolled back
		// (it failed in a cluster) while this Owns was added.
		f.mu.Lock()
		gone := f.primary != owner
		f.mu.Unlock()
		if gone {
			f.removeSource(index, false)
			return nil, ErrNoFor
		}
	}
	return &Cache[T]{f: f, index: index}, nil
}

// Remove removes the source from the fleet: in every engaged cluster its
// informer stops, its handler leaves the controller, its cache is freed
// and its metrics unregistered, and clusters engaged later do not build
// it. Keys it queued stay queued. It returns once that is done; removing a
// source twice does nothing. The For source stays (ErrRemoveFor).
func (c *Cache[T]) Remove() error {
	c.f.mu.Lock()
	role := c.f.sources[c.index].role
	c.f.mu.Unlock()
	if role == sourceFor {
		return ErrRemoveFor
	}
	c.f.removeSource(c.index, false)
	return nil
}

// removeSource marks the source at index removed and stops its informers
// in the engaged clusters. A rollback (For, Owns or Watches failing in a
// cluster) also forgets the For kind it set.
func (f *Fleet) removeSource(index int, rollback bool) {
	f.mu.Lock()
	s := &f.sources[index]
	if s.removed {
		f.mu.Unlock()
		return
	}
	s.removed, s.build = true, nil // its closure (scope, key function) freed; the place stays, by which Caches find theirs
	if rollback && s.role == sourceFor {
		f.primary = schema.GroupKind{}
	}
	members, sources := f.membersLocked(), slices.Clone(f.sources)
	f.mu.Unlock()
	for _, m := range members {
		_ = m.follow(f, sources) // an error builds a source added meanwhile: its own For, Owns or Watches reports it
	}
}

// membersLocked returns the clusters engaged here; f.mu is held.
func (f *Fleet) membersLocked() []*member {
	out := make([]*member, 0, len(f.clusters))
	for _, m := range f.clusters {
		out = append(out, m)
	}
	return out
}

// sourceName names the informers of a new source of gvk with role and
// scope, beside sources (after "<cluster>: "; its metrics and the debug
// page's rows are by name, so no two may share one): the kind alone for
// the first source of a kind, else the kind with the source's role and
// scope, "ConfigMap (Owns, labels replica=true)", numbered if that too is
// taken. Removed sources keep their names.
func sourceName(sources []source, gvk schema.GroupVersionKind, role int, scope Scope) string {
	taken := func(name string) bool {
		return slices.ContainsFunc(sources, func(s source) bool { return s.name == name })
	}
	if !slices.ContainsFunc(sources, func(s source) bool { return s.gvk == gvk }) && !taken(gvk.Kind) {
		return gvk.Kind
	}
	what := []string{[...]string{sourceFor: "For", sourceOwns: "Owns", sourceMapped: "Watches"}[role]}
	for _, p := range [][2]string{{"in ", scope.Namespace}, {"labels ", scope.LabelSelector}, {"fields ", scope.FieldSelector}} {
		if p[1] != "" {
			what = append(what, p[0]+p[1])
		}
	}
	name := fmt.Sprintf("%s (%s)", gvk.Kind, strings.Join(what, ", "))
	for n := 2; taken(name); n++ {
		name = fmt.Sprintf("%s (%s) %d", gvk.Kind, strings.Join(what, ", "), n)
	}
	return name
}

// build makes the informer of T in m, called "<cluster>: <name>", and puts
// its handler, naming keys as names does, on the fleet's controller; role
// is the source's, owner the For kind. In a spread cluster, For's and
// Owns's informers cache only this replica's share (see spreadShard).
func build[T object.Object](f *Fleet, m *member, gvk schema.GroupVersionKind, name string, scope Scope,
	names handler.KeyFunc[T, object.ObjectName], role int, owner schema.GroupKind) (*sourceRun, error) {
	opts := listwatch.Options{LabelSelector: scope.LabelSelector, FieldSelector: scope.FieldSelector}
	cut := f.spread[m.name] && role != sourceMapped
	if cut {
		if role == sourceFor {
			owner = schema.GroupKind{}
		}
		opts.Shard = f.spreadShard(m.name, owner)
	}
	fo := f.opts.Informers
	fo.Telemetry, fo.Snapshots = f.opts.Controller.Telemetry, informer.SnapshotOptions{}
	lw := listwatch.Kind[T](m.discovery, gvk, listwatch.KindOptions{Namespace: scope.Namespace, Options: opts,
		KeepManagedFields: fo.KeepManagedFields, KeepManagedFieldsOf: fo.KeepManagedFieldsOf,
		KeepManagedFieldsOfAdded: fo.KeepManagedFieldsOfAdded})
	inf, err := informer.New[T](lw, informer.Options[T]{Name: m.name + ": " + name, FactoryOptions: fo})
	if err != nil {
		return nil, err
	}
	cluster := m.name
	keys := func(dst []Key, e *handler.Event[T]) []Key {
		var buf [1]object.ObjectName
		for _, n := range names(buf[:0], e) {
			dst = append(dst, Key{Cluster: cluster, ObjectName: n})
		}
		return dst
	}
	reg, err := inf.AddEventHandler(handler.Enqueue[T, Key](f.ctrl, keys), informer.HandlerOptions{Name: f.ctrl.Name()})
	if err != nil {
		return nil, err
	}
	r := &sourceRun{run: inf.Run, synced: inf.HasSynced, lastErr: inf.LastError,
		remove: reg.Remove, close: inf.Close, reader: inf.Reader(), stats: inf.Stats,
		kind: strings.TrimPrefix(gvk.GroupVersion().String()+" "+gvk.Kind, "/"), scope: scope}
	if role == sourceFor {
		r.primaries, r.cache = inf.Reader().Keys, inf
	}
	if cut {
		r.relist = inf.Relist
	}
	return r, nil
}

// Reader returns the source's cache in the cluster called cluster, if the
// cluster is engaged and the source not removed.
func (c *Cache[T]) Reader(cluster string) (store.Reader[T], bool) {
	c.f.mu.Lock()
	m := c.f.clusters[cluster]
	c.f.mu.Unlock()
	if m == nil {
		return store.Reader[T]{}, false
	}
	m.mu.Lock()
	var run *sourceRun
	if c.index < len(m.runs) {
		run = m.runs[c.index]
	}
	m.mu.Unlock()
	if run == nil {
		return store.Reader[T]{}, false
	}
	r, ok := run.reader.(store.Reader[T])
	return r, ok
}

// Get returns the cached object k names, if its cluster is engaged and the
// object is cached.
func (c *Cache[T]) Get(k Key) (T, bool) {
	r, ok := c.Reader(k.Cluster)
	if !ok {
		var zero T
		return zero, false
	}
	return r.Get(k.ObjectName)
}

// kindOf returns T's kind from scheme.
func kindOf[T object.Object](scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer {
		return schema.GroupVersionKind{}, fmt.Errorf("fleet: %v is not a pointer to an API type", t)
	}
	obj, ok := reflect.New(t.Elem()).Interface().(runtime.Object)
	if !ok {
		return schema.GroupVersionKind{}, fmt.Errorf("fleet: %v is not a runtime.Object", t)
	}
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf("fleet: %v is not in the fleet's scheme: %w", t, err)
	}
	return gvks[0], nil
}
