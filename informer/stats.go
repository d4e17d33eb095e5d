package informer

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Stats is a snapshot of an informer's state: its cache, its reflector and
// each handler's backlog. It is computed when asked for; the informer keeps
// nothing up to date for it.
type Stats struct {
	// Name is the informer's name.
	Name string
	// Synced reports that the first list was applied to the cache.
	Synced bool
	// Objects is the number of cached objects.
	Objects int
	// ApproxBytes estimates the cache's size: the mean encoded size
	// (protobuf where the type has it, else JSON) of up to SampleSize
	// cached objects, times Objects. It is not the heap the cache holds
	// (decoded objects take several times more), only a scale.
	ApproxBytes int64
	// ResourceVersion is the resource version the cache reflects.
	ResourceVersion string
	// Queued is the number of items the informer has received and not
	// applied to its cache yet.
	Queued int
	// Reflector is the state of the informer's list and watch.
	Reflector reflector.Stats
	// Handlers are the registered handlers, by name.
	Handlers []HandlerStats
	// Start says whether the cache started warm, from a snapshot, or cold
	// and why; Snapshot counts the snapshots written (see
	// Options.Snapshot).
	Start    CacheStart
	Snapshot SnapshotStats
}

// HandlerStats is one handler's backlog.
type HandlerStats struct {
	// Name is the handler's name (HandlerOptions.Name).
	Name string
	// Synced reports Registration.HasSynced.
	Synced bool
	// PendingKeys is the number of keys with notifications the handler has
	// not received yet, and OldestPending the age of the oldest of them.
	PendingKeys   int
	OldestPending time.Duration
	// Panics counts panics recovered from the handler.
	Panics uint64
}

// SampleSize is the number of objects Stats encodes to estimate a cache's
// size: a few milliseconds whatever the cache holds.
const SampleSize = 64

// Stats returns a snapshot of the informer's state. Its cost does not grow
// with the cache: it encodes up to SampleSize cached objects, with no lock
// held, and takes a few short locks. Safe for concurrent use.
func (i *SharedIndexInformer[T]) Stats() Stats {
	now := time.Now()
	st := Stats{Name: i.name, Synced: i.HasSynced(), Queued: i.fifo.Len(),
		ResourceVersion: i.idx.ResourceVersion(), Reflector: i.refl.Stats(), Start: i.CacheStart(), Snapshot: i.SnapshotStats()}
	sample, n := i.idx.Sample(SampleSize)
	st.Objects = n
	st.ApproxBytes = approxBytes(sample, n)
	i.mu.Lock()
	ls := slices.Clone(i.listeners)
	i.mu.Unlock()
	for _, l := range ls {
		keys, age := l.lag(now)
		st.Handlers = append(st.Handlers, HandlerStats{Name: l.name, Synced: i.HasSynced() && l.hasSynced(),
			PendingKeys: keys, OldestPending: age, Panics: l.panics.Load()})
	}
	slices.SortFunc(st.Handlers, func(a, b HandlerStats) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// approxBytes estimates the encoded size of n objects from sample.
func approxBytes[T object.Object](sample []T, n int) int64 {
	if len(sample) == 0 {
		return 0
	}
	var total int64
	for _, obj := range sample {
		total += int64(encodedSize(obj))
	}
	return total * int64(n) / int64(len(sample))
}

// encodedSize is obj's protobuf size when its type has one (the
// Kubernetes API types do), else its JSON size.
func encodedSize(obj any) int {
	if p, ok := obj.(interface{ Size() int }); ok {
		return p.Size()
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return 0
	}
	return len(b)
}

// CachedVersion returns the resource version of the object called name, and
// whether the cache holds it. Safe for concurrent use.
func (i *SharedIndexInformer[T]) CachedVersion(name object.ObjectName) (rv string, ok bool) {
	obj, ok := i.idx.GetByKey(name.String())
	if !ok {
		return "", false
	}
	return obj.GetResourceVersion(), true
}

// statser is the part of every *SharedIndexInformer[T] that Factory.Stats
// reads.
type statser interface{ Stats() Stats }

// Stats returns a snapshot of every informer of the factory, sorted by
// name. See SharedIndexInformer.Stats for the cost.
func (f *Factory) Stats() []Stats {
	f.mu.Lock()
	all := make([]statser, 0, len(f.informers))
	for _, s := range f.informers {
		if st, ok := s.inf.(statser); ok {
			all = append(all, st)
		}
	}
	f.mu.Unlock()
	out := make([]Stats, 0, len(all))
	for _, s := range all {
		out = append(out, s.Stats())
	}
	slices.SortFunc(out, func(a, b Stats) int { return strings.Compare(a.Name, b.Name) })
	return out
}
