package store

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ctrlkit/ctrlkit/object"
)

// Options configures an Indexer. The zero value is a store with only the
// namespace index.
type Options[T object.Object] struct {
	// Indexers are index functions in addition to NamespaceIndex, which is
	// always present and cannot be redefined. Default: none.
	Indexers Indexers[T]
}

// Indexer is the cache every worker reads: a thread-safe store of typed
// objects keyed by object.MetaNamespaceKeyFunc ("namespace/name"), with any
// number of secondary indexes and the resource version it reflects.
//
// Objects are shared, not copied: values passed in and handed out belong to
// the store and every caller must treat them as read-only. Returned slices
// are fresh snapshots the caller owns; their order is unspecified.
//
// All methods are safe for concurrent use. Readers never block each other,
// but for the first read of the namespace index (below). No method holds
// the lock while it runs an index function: a write holds it only to update
// a few map entries, a Replace only to swap in the cache it built,
// AddIndexers only to link in values it computed (a pass over the objects,
// with no user code), and the first read by namespace only to build that
// index from the namespaces the entries hold.
//
// The namespace index is kept only once something reads it (ByIndex,
// IndexKeys, Index or ListIndexFuncValues with NamespaceIndex; a Reader's
// List or a Lister's Namespace(ns).List of one namespace): that first read
// builds it under the write lock, a pass over the entries (10-12 ms at
// 100,000 objects: BenchmarkIndexer_FirstReadByNamespace100k), and every
// write keeps it from then on (a Replace that built its cache before that
// read is indexed at the next read). Until then writes skip it: a load of
// 100,000 objects takes about 10% less time and 15% (100 namespaces) to 30%
// (one) less memory (BenchmarkIndexer_Load100k).
type Indexer[T object.Object] struct {
	// funcs is the current list of index functions. It is replaced only with
	// mu held for writing, and read anywhere without the lock: writers compute
	// index values with the list they loaded, then, under mu, retry if it
	// changed in between. Invariant: len(c.indices) == len(funcs.fns).
	// It is replaced only by AddIndexers.
	funcs atomic.Pointer[indexFuncs[T]]
	// seq numbers writes, so that AddIndexers can tell which items were
	// rewritten while it ran the new index functions without the lock.
	seq atomic.Uint64
	// gen is the relist generation: BeginRelist advances it, and every
	// write stamps its entry with it (see EndRelist). It wraps after 2^32
	// relists, and an entry left unwritten through exactly that many would
	// be taken for a current one.
	gen atomic.Uint32
	// addMu serialises AddIndexers calls (never taken by readers or
	// writers).
	addMu sync.Mutex
	// nsRead is set by the first read of the namespace index: from then
	// on the caches Replace builds keep it from their first entry.
	nsRead atomic.Bool

	mu sync.RWMutex
	// mu guards c and rv.
	c  *cache[T]
	rv string // the newest resource version written, replaced or bookmarked
}

// New returns an empty store with the namespace index and opts.Indexers. It
// fails if an indexer is named NamespaceIndex or "", or has a nil function.
func New[T object.Object](opts Options[T]) (*Indexer[T], error) {
	fs, err := newIndexFuncs[T]().with(opts.Indexers)
	if err != nil {
		return nil, err
	}
	fs.ready.Store(int64(len(fs.fns)))
	s := &Indexer[T]{c: newCache[T](len(fs.fns), 0)}
	s.funcs.Store(fs)
	return s, nil
}

// rlockIndex takes the read lock with index i ready to read: the namespace
// index is built (under the write lock) at its first read.
func (s *Indexer[T]) rlockIndex(i int) {
	if i == 0 {
		s.nsRead.Store(true)
	}
	s.mu.RLock()
	for i == 0 && !s.c.nsIndexed { // again if a Replace swapped in a cache built before nsRead
		s.mu.RUnlock()
		s.mu.Lock()
		s.c.buildNamespaceIndex()
		s.mu.Unlock()
		s.mu.RLock()
	}
}

// keyOf returns the store key of obj.
func keyOf[T object.Object](obj T) (string, error) {
	key, err := object.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	return key, nil
}

// lockFor takes the write lock and reports whether fs is still the current
// list of index functions. If it is not, it releases the lock again: values
// computed with fs are stale and the caller must recompute them.
func (s *Indexer[T]) lockFor(fs *indexFuncs[T]) bool {
	s.mu.Lock()
	if s.funcs.Load() == fs {
		return true
	}
	s.mu.Unlock()
	return false
}

// Add stores obj under its key, replacing any object already there (Add and
// Update are the same upsert; both exist to mirror the events that cause
// them). The store's resource version advances to obj's if newer.
//
// It runs the index functions first, without the lock; if one fails, or
// obj has no valid key, it returns the error and the store is unchanged.
// It blocks only while other goroutines hold the lock. The store keeps obj:
// the caller must not modify it afterwards.
func (s *Indexer[T]) Add(obj T) error {
	_, _, err := s.putObject(obj)
	return err
}

// Update is Add: it stores obj under its key, replacing what was there.
func (s *Indexer[T]) Update(obj T) error {
	_, _, err := s.putObject(obj)
	return err
}

func (s *Indexer[T]) putObject(obj T) (old T, existed bool, err error) {
	key, err := keyOf(obj)
	if err != nil {
		return old, false, err
	}
	_, old, existed, err = s.put(key, obj)
	return old, existed, err
}

// Put is Add for a caller that already has obj's key (an informer computes
// it once per event): it stores obj under key and returns the object it
// replaced, if any. key must be obj's object.MetaNamespaceKeyFunc key; Put
// checks that without allocating and fails, changing nothing, on a
// mismatch.
func (s *Indexer[T]) Put(key string, obj T) (old T, existed bool, err error) {
	_, old, existed, err = s.PutKey(key, obj)
	return old, existed, err
}

// PutKey is Put that also returns the key string the store holds obj
// under: key itself for an object it did not hold, otherwise the string
// of the object's first write, which the store keeps (one copy of an
// object's key however often it is written). A caller that hands that
// string on, as an informer does to its handlers and they to their
// queues, lets every later lookup by it (a Reader's Get, a queue's check
// for a key it holds) compare pointers instead of bytes.
func (s *Indexer[T]) PutKey(key string, obj T) (stored string, old T, existed bool, err error) {
	if !object.KeyMatches(key, obj) {
		return "", old, false, fmt.Errorf("store: %w: key %q is not the key of %s", object.ErrInvalidKey, key, object.NameOf(obj))
	}
	return s.put(key, obj)
}

func (s *Indexer[T]) put(key string, obj T) (stored string, old T, existed bool, err error) {
	for {
		fs := s.funcs.Load()
		rest, err := fs.valuesAfterNamespace(key, obj)
		if err != nil {
			return "", old, false, err
		}
		seq := s.seq.Add(1)
		if !s.lockFor(fs) {
			continue
		}
		stored, old, existed = s.c.put(key, entry[T]{obj: obj, vals: rest, seq: seq, gen: s.gen.Load()})
		s.rv = newerVersion(s.rv, obj.GetResourceVersion())
		s.mu.Unlock()
		return stored, old, existed, nil
	}
}

// Delete removes the object stored under obj's key, if any; deleting a
// missing key is not an error. obj is typically the deleted object from a
// watch event, and the store's resource version advances to its version.
// Delete calls no index function (the values computed when the object was
// stored are reused), so it fails only on an invalid key.
func (s *Indexer[T]) Delete(obj T) error {
	key, err := keyOf(obj)
	if err != nil {
		return err
	}
	s.Remove(key, obj.GetResourceVersion())
	return nil
}

// Remove is Delete by key: it removes the object stored under key, if any,
// returns it, and advances the store's resource version to resourceVersion
// (the deleted object's; "" leaves it).
func (s *Indexer[T]) Remove(key, resourceVersion string) (old T, existed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, existed = s.c.remove(key)
	s.rv = newerVersion(s.rv, resourceVersion)
	return old, existed
}

// Replace swaps the store's content for exactly items (the result of a
// list): keys absent from items disappear. If two items share a key the
// later wins. The store's resource version advances to resourceVersion (the
// list's), or, when that is empty, to the versions of items as if each had
// been written in order.
//
// The new content and its indexes are built without the lock, then swapped
// in at once, so readers see either the old or the new content and are
// never blocked for the build (except by the namespace index's, when the
// first read by namespace came while the content was built: it is then
// built under the lock before the swap). On an invalid key or an index function error
// it returns the error and the store is unchanged. The store keeps the
// objects, not the slice.
func (s *Indexer[T]) Replace(items []T, resourceVersion string) error {
	keys := make([]string, len(items))
	for i, obj := range items {
		key, err := keyOf(obj)
		if err != nil {
			return err
		}
		keys[i] = key
	}
	for {
		fs := s.funcs.Load()
		seq := s.seq.Add(1)
		c := newCache[T](len(fs.fns), len(items))
		c.nsIndexed = s.nsRead.Load()
		slab := make([]entry[T], len(items)) // one allocation for every entry
		for i, obj := range items {
			vals, err := fs.valuesAfterNamespace(keys[i], obj)
			if err != nil {
				return err
			}
			slab[i] = entry[T]{obj: obj, vals: vals, seq: seq, gen: s.gen.Load()}
			c.putEntry(keys[i], &slab[i])
		}
		if !s.lockFor(fs) {
			continue
		}
		if !c.nsIndexed && s.nsRead.Load() {
			c.buildNamespaceIndex() // read by namespace for the first time while c was built
		}
		s.c = c
		if resourceVersion == "" { // rare: lists carry a version
			s.rv = maxVersion(s.rv, items)
		}
		s.rv = newerVersion(s.rv, resourceVersion)
		s.mu.Unlock()
		return nil
	}
}

// Reserve makes room for n objects in a store that holds none, so that a
// load of a known size (a snapshot) does not grow the store step by step.
// A store that holds objects is left as it is.
func (s *Indexer[T]) Reserve(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.c.items) == 0 && n > 0 {
		s.c.items = make(map[string]*entry[T], n)
	}
}

// Item is an object with its store key.
type Item[T object.Object] struct {
	Key    string
	Object T
}

// BeginRelist starts a streamed relist, one that is applied as its pages
// arrive instead of being held whole beside the cache: every object written
// from now on (Put, Add, Update, Replace) belongs to the new generation,
// and EndRelist removes every object that does not. Readers see each object
// of the relist as soon as it is written, as with client-go's relists;
// only Replace swaps everything at once. A BeginRelist without EndRelist
// (a list that failed halfway) is superseded by the next one.
func (s *Indexer[T]) BeginRelist() {
	s.mu.Lock()
	s.gen.Add(1)
	s.mu.Unlock()
}

// EndRelist ends the relist begun by the last BeginRelist: it removes
// every object not written since then and returns them (in no particular
// order), and advances the store's resource version to resourceVersion,
// the list's. It scans the keys with only the read lock held.
func (s *Indexer[T]) EndRelist(resourceVersion string) []Item[T] {
	s.mu.RLock()
	gen := s.gen.Load()
	var stale []string
	for key, e := range s.c.items {
		if e.gen != gen {
			stale = append(stale, key)
		}
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := make([]Item[T], 0, len(stale))
	for _, key := range stale {
		if e := s.c.items[key]; e != nil && e.gen != gen { // not rewritten meanwhile
			old, _ := s.c.remove(key)
			gone = append(gone, Item[T]{Key: key, Object: old})
		}
	}
	s.rv = newerVersion(s.rv, resourceVersion)
	return gone
}

// Bookmark records that the store reflects resourceVersion even though no
// object changed (a watch bookmark). Like every write it only moves the
// resource version forward; see ResourceVersion.
func (s *Indexer[T]) Bookmark(resourceVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = newerVersion(s.rv, resourceVersion)
}

// ResourceVersion returns the newest resource version the store has seen in
// its writes, replaces and bookmarks, or "" if none. Versions are compared
// as unsigned integers (etcd revisions); when two cannot be both parsed, the
// later one seen wins, and an empty version is ignored. It is safe for
// concurrent use and never blocks on other readers (but for the first read
// of the namespace index, which builds it).
func (s *Indexer[T]) ResourceVersion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// checkInvariants returns an error describing a broken invariant of the
// store or its cache, or nil. Tests and fuzzers call it.
func (s *Indexer[T]) checkInvariants() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fs := s.funcs.Load()
	if n, want := len(s.c.indices), len(fs.fns); n != want {
		return fmt.Errorf("cache has %d indices, want %d", n, want)
	}
	return s.c.checkInvariants(int(fs.ready.Load()))
}
