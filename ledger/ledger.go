package ledger

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/internal/apiwrite"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Ref names one object of one resource.
type Ref = apiwrite.Ref

// Cache is one informer's cache as the ledger sees it.
type Cache struct {
	// Lookup reads one object: its resource version and whether the cache
	// holds it.
	Lookup func(name object.ObjectName) (resourceVersion string, present bool)
	// Holds reports whether an object of this namespace and these labels
	// belongs in the cache (its namespace and label selector); nil: every
	// object does. A written object no cache would hold is not waited for.
	Holds func(namespace string, labels map[string]string) bool
}

// write is one recorded write: the version the server returned, or a
// delete.
type write struct {
	rv      string
	deleted bool
}

// owed is what the ledger keeps for one owner key: the writes the caches
// still owe it.
type owed struct {
	writes map[Ref]write
	since  time.Time // when the oldest pending write was recorded
}

// Options configure a Ledger.
type Options struct {
	// Bound is the longest a key is held for its writes. Default: 5s.
	Bound time.Duration
	// Telemetry's Registerer receives the ledger's metrics. The ledger
	// logs nothing.
	telemetry.Telemetry
}

// Ledger records the writes made for owner keys and tells when the caches
// have caught up with them. The zero value is not usable; call New.
type Ledger struct {
	bound   time.Duration
	metrics *metrics
	pending atomic.Int64 // owners with pending writes; 0 makes Observe free

	// mu guards the fields below. Invariant: an owner is in owners iff it
	// has a pending write; every pending write's Ref maps back to its owner
	// in waiting.
	mu       sync.Mutex
	caches   map[schema.GroupResource][]tracked
	owners   map[object.ObjectName]*owed
	waiting  map[Ref]map[object.ObjectName]struct{}
	releases []release // copied on removal: Settle calls a snapshot outside mu
	nextID   uint64    // of the next release function or tracked cache
}

// New returns an empty Ledger. It fails only when its metrics cannot be
// registered.
func New(opts Options) (*Ledger, error) {
	if opts.Bound <= 0 {
		opts.Bound = 5 * time.Second
	}
	m, err := newMetrics(opts.Telemetry)
	if err != nil {
		return nil, err
	}
	return &Ledger{bound: opts.Bound, metrics: m, caches: map[schema.GroupResource][]tracked{},
		owners: map[object.ObjectName]*owed{}, waiting: map[Ref]map[object.ObjectName]struct{}{}}, nil
}

// Track says that a cache of resource exists and how to read it: writes of
// objects it holds are waited for. Call it once per cache (an informer);
// remove forgets the cache (an informer stopped while the process goes
// on), and calling it again does nothing.
func (l *Ledger) Track(resource schema.GroupResource, c Cache) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	id := l.nextID
	l.caches[resource] = append(l.caches[resource], tracked{id: id, Cache: c})
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.caches[resource] = slices.DeleteFunc(l.caches[resource], func(t tracked) bool { return t.id == id })
		if len(l.caches[resource]) == 0 {
			delete(l.caches, resource)
		}
	}
}

// tracked is a cache Track was given.
type tracked struct {
	id uint64
	Cache
}

// OnRelease registers fn to be called with an owner whose writes the caches
// have all applied (a gate re-queues the key with it). fn must not block.
// remove unregisters it (a controller removed while the manager runs);
// calling it again does nothing.
func (l *Ledger) OnRelease(fn func(object.ObjectName)) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	id := l.nextID
	l.releases = append(l.releases, release{id: id, fn: fn})
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.releases = slices.DeleteFunc(slices.Clone(l.releases), func(r release) bool { return r.id == id })
	}
}

// release is a function OnRelease registered.
type release struct {
	id uint64
	fn func(object.ObjectName)
}

// Record notes that a write made for owner left ref at resourceVersion (or
// deleted it); labels are the written object's (nil when unknown, as for a
// delete). A write no tracked cache would hold, or that the caches have
// already applied, is not kept.
func (l *Ledger) Record(owner object.ObjectName, ref Ref, resourceVersion string, labels map[string]string, deleted bool) {
	w := write{deleted: deleted, rv: resourceVersion}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.heldLocked(ref, labels, deleted) || l.appliedLocked(ref, w) {
		return
	}
	o := l.owners[owner]
	if o == nil {
		o = &owed{writes: map[Ref]write{}, since: time.Now()}
		l.owners[owner] = o
		l.pending.Add(1)
	}
	o.writes[ref] = w
	if l.waiting[ref] == nil {
		l.waiting[ref] = map[object.ObjectName]struct{}{}
	}
	l.waiting[ref][owner] = struct{}{}
	l.metrics.recorded()
}

// heldLocked reports whether some cache would hold the written object. For
// a delete (labels unknown), a cache holding the object counts.
func (l *Ledger) heldLocked(ref Ref, labels map[string]string, deleted bool) bool {
	for _, c := range l.caches[ref.Resource] {
		if deleted {
			if _, present := c.Lookup(ref.Name); present {
				return true
			}
			continue
		}
		if c.Holds == nil || c.Holds(ref.Name.Namespace, labels) {
			return true
		}
	}
	return false
}

// appliedLocked reports whether the caches reflect w: a delete, when none
// holds the object; any other write, when one holds it at w's version or
// newer.
func (l *Ledger) appliedLocked(ref Ref, w write) bool {
	for _, c := range l.caches[ref.Resource] {
		rv, present := c.Lookup(ref.Name)
		switch {
		case w.deleted && present:
			return false
		case w.deleted, !present:
			continue
		}
		// A version that is not a number cannot be ordered: it waits for
		// the bound.
		if cmp, ok := object.CompareResourceVersions(rv, w.rv); ok && cmp >= 0 {
			return true
		}
	}
	return w.deleted
}

// Observe tells the ledger that the cache of resource applied a change of
// name (an informer handler calls it after each event). Owners whose writes
// are now all applied are released.
func (l *Ledger) Observe(resource schema.GroupResource, name object.ObjectName) {
	if l.pending.Load() == 0 {
		return
	}
	ref := Ref{Resource: resource, Name: name}
	l.mu.Lock()
	var released []object.ObjectName
	for ow := range l.waiting[ref] {
		if l.settleLocked(ow) {
			released = append(released, ow)
		}
	}
	fns := l.releases
	l.mu.Unlock()
	for _, ow := range released {
		for _, r := range fns {
			r.fn(ow)
		}
	}
}

// settleLocked drops owner's writes the caches have applied and reports
// whether none is left.
func (l *Ledger) settleLocked(ow object.ObjectName) bool {
	o := l.owners[ow]
	if o == nil {
		return true
	}
	for ref, w := range o.writes {
		if l.appliedLocked(ref, w) {
			l.dropLocked(ow, o, ref)
		}
	}
	if len(o.writes) > 0 {
		return false
	}
	l.metrics.held(time.Since(o.since))
	return true
}

func (l *Ledger) dropLocked(ow object.ObjectName, o *owed, ref Ref) {
	delete(o.writes, ref)
	delete(l.waiting[ref], ow)
	if len(l.waiting[ref]) == 0 {
		delete(l.waiting, ref)
	}
	if len(o.writes) == 0 {
		delete(l.owners, ow)
		l.pending.Add(-1)
	}
}

// recheck is how soon a held key is looked at again at the latest.
const recheck = 100 * time.Millisecond

// Wait reports whether owner must wait for the caches, and for at most how
// long (what is left of the bound). When the bound has passed, the owner's
// writes are forgotten, the timeout counted, and Wait says go.
func (l *Ledger) Wait(ow object.ObjectName) (wait bool, atMost time.Duration) {
	if l.pending.Load() == 0 {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.owners[ow]
	if o == nil || l.settleLocked(ow) {
		return false, 0
	}
	left := l.bound - time.Since(o.since)
	if left > 0 {
		// Events release the key at once (Observe); checking again soon
		// covers writes of resources whose events the gated controller does
		// not handle.
		return true, min(left, recheck)
	}
	for ref := range o.writes {
		l.dropLocked(ow, o, ref)
	}
	l.metrics.timedOut()
	return false, 0
}

// Pending returns the number of owners with writes the caches have not
// applied yet.
func (l *Ledger) Pending() int { return int(l.pending.Load()) }

// ownerKey carries the owner in a context.
type ownerKey struct{}

// WithOwner returns a context whose writes (through a client whose transport
// Transport wrapped) are recorded for owner.
func WithOwner(ctx context.Context, owner object.ObjectName) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFrom returns the owner WithOwner put in ctx.
func OwnerFrom(ctx context.Context) (object.ObjectName, bool) {
	o, ok := ctx.Value(ownerKey{}).(object.ObjectName)
	return o, ok
}
