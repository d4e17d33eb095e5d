package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ctrlkit/ctrlkit/object"
)

// keySet is a set of store keys.
type keySet map[string]struct{}

// entry is a stored object with the index values computed for it when it
// was written, so that removing or replacing it never calls an index
// function again.
//
// Entries are held by pointer and updated in place under the store's lock:
// a write finds its entry with one lookup and writes nothing back to the
// map (the entry keeps the key string of the object's first write, see
// put). The namespace index's value is the key's namespace part, and the
// entry holds its place in that index: a store with no other index keeps
// one 64-byte entry per object (from a chunk of sixteen, or a removed
// object's, see newEntry), and a write need not check that the namespace
// did not change (the same key, the same namespace).
type entry[T object.Object] struct {
	obj  T
	key  string     // the string it is stored and indexed under: its first write's (see cache.put)
	vals [][]string // vals[i]: the values of index function i+1
	seq  uint64     // the write that stored it; see Indexer.AddIndexers
	gen  uint32     // the relist generation it was written in; see Indexer.BeginRelist
	at   int32      // its position in byNS[ns].entries, while the namespace index is kept
}

// namespace returns the value of e's namespace index (position 0): its
// key's namespace part, which Indexer's keys fix (object.KeyMatches), so
// that an entry holds its namespace without a string of its own.
func (e *entry[T]) namespace() string {
	if i := strings.IndexByte(e.key, '/'); i >= 0 {
		return e.key[:i]
	}
	return ""
}

// indexes returns the number of indexes e has values for.
func (e *entry[T]) indexes() int { return 1 + len(e.vals) }

// members is the namespace index's value for one namespace: the entries of
// its objects, in no order, each holding its position (entry.at). Filled
// for 100,000 objects it takes about a third of the time and a sixth of the
// memory of a set of keys per namespace, and a read of a namespace looks
// nothing up per object (BenchmarkIndexer_FirstReadByNamespace100k,
// BenchmarkIndexer_ByIndex).
type members[T object.Object] struct{ entries []*entry[T] }

// cache is the index bookkeeping: objects by key and, for each index, keys
// by value (for the namespace index, entries by namespace). It is a plain type with no lock and calls no user code; Indexer
// wraps it with a lock and computes index values before calling it.
//
// Invariants (checked by checkInvariants):
//   - every entry has one value list per index, e.indexes() ==
//     len(indices), except while AddIndexers builds new indices: entries
//     stored before grow have none for them until fill;
//   - for i >= 1, indices[i][v] contains k exactly when items[k].vals[i-1]
//     contains v; indices[0] stays nil: the namespace index is byNS;
//   - byNS[ns].entries[e.at] == e exactly when e is an entry of namespace
//     ns, except that byNS is empty until nsIndexed: it is built at its
//     first read (see buildNamespaceIndex);
//   - items[k].key == k (the same string: the one of the object's first
//     write, which the index sets hold too; see put);
//   - no index holds an empty set or member list, so values that no object
//     carries any more leave no trace (high-cardinality values do not leak
//     memory).
type cache[T object.Object] struct {
	items   map[string]*entry[T]
	indices []map[string]keySet
	byNS    map[string]*members[T]
	// nsIndexed says whether byNS, the namespace index, is kept. It is not
	// until something reads it: entries hold their namespace, so the index
	// can be built at once when first asked for, and a store nobody
	// queries by namespace (a namespaced informer, a controller reading by
	// key) never pays for it, nor for its memory.
	nsIndexed bool
	// For newEntry: chunk, the entries of the last chunk not handed out
	// yet; free, the emptied entries of removed objects.
	chunk []entry[T]
	free  []*entry[T]
}

// entryChunk is how many entries are allocated together: sixteen 64-byte
// entries make one 1 KiB object. The collector scans an object of more
// than 512 bytes whole, so that it reaches the cached objects in runs of
// sixteen; entries allocated one by one, as objects of 64 bytes, are scanned
// through Go 1.26's per-span queue, and there the parts of the cached
// objects they point to ended up scanned one by one rather than a span at
// a time: 1.3x-1.4x the collector's CPU per cycle for the same heap
// (bench/podpipeline).
const entryChunk = 16

// newEntry returns an empty entry: one a removed object left, else the
// next of a chunk.
func (c *cache[T]) newEntry() *entry[T] {
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		return e
	}
	if len(c.chunk) == 0 {
		c.chunk = make([]entry[T], entryChunk)
	}
	e := &c.chunk[0]
	c.chunk = c.chunk[1:]
	return e
}

// freeEntry keeps e, emptied, for newEntry. Past 1,024 free entries and
// more than are in use (most objects were deleted), they are let go: a
// chunk none of whose entries holds an object goes back to the collector;
// one that still holds some stays, at most 1 KiB per object held.
func (c *cache[T]) freeEntry(e *entry[T]) {
	*e = entry[T]{} // drop what it holds
	if len(c.free) >= 1024 && len(c.free) > len(c.items) {
		c.free = nil
		return
	}
	c.free = append(c.free, e)
}

// newCache returns an empty cache with n indices, sized for size items.
func newCache[T object.Object](n, size int) *cache[T] {
	c := &cache[T]{items: make(map[string]*entry[T], size), indices: make([]map[string]keySet, n), byNS: map[string]*members[T]{}}
	for i := 1; i < n; i++ {
		c.indices[i] = map[string]keySet{}
	}
	return c
}

// put stores e under key, replacing and unindexing any previous entry, and
// returns the key string it is stored under and the previous object. Index
// value lists equal to the previous entry's are shared with it rather than
// kept twice, and an entry whose values all stay the same is updated in
// place, allocating nothing.
//
// An object keeps the key string of its first write for as long as it is
// stored: the map, its index sets and the entry all hold that one string,
// and put returns it, so that the informer hands it on to handlers and
// through them to queues. A worker's read by the key it was given, and a
// queue's lookup of a key it already holds, then find it by comparing
// pointers instead of the bytes of another copy, and an object written
// many times keeps one copy of its key alive.
func (c *cache[T]) put(key string, e entry[T]) (stored string, old T, had bool) {
	prev := c.items[key]
	if prev == nil {
		e.key = key
		added := c.newEntry() // only here: e itself does not escape
		*added = e
		c.items[key] = added
		c.indexAll(key, added)
		return key, old, false
	}
	key = prev.key
	old = prev.obj
	if sameValues(prev.vals, e.vals) {
		prev.obj, prev.seq, prev.gen = e.obj, e.seq, e.gen
		return key, old, true
	}
	for i, vals := range e.vals {
		if i < len(prev.vals) {
			if slices.Equal(prev.vals[i], vals) {
				e.vals[i] = prev.vals[i]
				continue
			}
			c.unindex(i+1, key, prev.vals[i])
		}
		c.index(i+1, key, vals)
	}
	e.at, e.key = prev.at, key // the same key: the same namespace, the same place in its members
	*prev = e
	return key, old, true
}

// indexAll adds key, stored as e, to every index under e's values.
func (c *cache[T]) indexAll(key string, e *entry[T]) {
	c.join(e)
	for i, vals := range e.vals {
		c.index(i+1, key, vals)
	}
}

// putEntry is put for a cache being built with no entry under key yet
// (Replace), e allocated by the caller (from a slab). A later key's equal
// entry replaces it as put would.
func (c *cache[T]) putEntry(key string, e *entry[T]) {
	if prev := c.items[key]; prev != nil { // the same key twice in a list: the later wins
		c.put(key, *e)
		*e = entry[T]{}
		return
	}
	e.key = key
	c.items[key] = e
	c.indexAll(key, e)
}

// sameValues reports whether two entries' index values are equal.
func sameValues(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// remove deletes the entry under key, if any, and reports whether it existed.
func (c *cache[T]) remove(key string) (old T, had bool) {
	e := c.items[key]
	if e == nil {
		return old, false
	}
	delete(c.items, key)
	c.leave(e)
	for i, vals := range e.vals {
		c.unindex(i+1, key, vals)
	}
	old = e.obj
	c.freeEntry(e)
	return old, true
}

// index adds key to index i (>= 1) under vals.
func (c *cache[T]) index(i int, key string, vals []string) {
	idx := c.indices[i]
	for _, v := range vals {
		set := idx[v]
		if set == nil {
			set = keySet{}
			idx[v] = set
		}
		set[key] = struct{}{}
	}
}

// unindex removes key from index i (>= 1) under vals.
func (c *cache[T]) unindex(i int, key string, vals []string) {
	idx := c.indices[i]
	for _, v := range vals {
		set := idx[v]
		delete(set, key)
		if len(set) == 0 {
			delete(idx, v)
		}
	}
}

// join adds e to its namespace's members, if the namespace index is kept.
func (c *cache[T]) join(e *entry[T]) {
	if !c.nsIndexed {
		return
	}
	ns := e.namespace()
	m := c.byNS[ns]
	if m == nil {
		m = &members[T]{}
		c.byNS[ns] = m
	}
	e.at = int32(len(m.entries))
	m.entries = append(m.entries, e)
}

// leave removes e from its namespace's members, if the namespace index is
// kept: the last member takes its place. A namespace left with no member
// is dropped, and one with room for more than 64 that is left with under a
// quarter of it gets a smaller slice (a namespace that shrank does not keep
// the memory of its peak).
func (c *cache[T]) leave(e *entry[T]) {
	if !c.nsIndexed {
		return
	}
	ns := e.namespace()
	m := c.byNS[ns]
	last := len(m.entries) - 1
	if last == 0 {
		delete(c.byNS, ns)
		return
	}
	moved := m.entries[last]
	m.entries[e.at], moved.at = moved, e.at
	m.entries[last] = nil
	m.entries = m.entries[:last]
	if cap(m.entries) > 64 && last < cap(m.entries)/4 {
		m.entries = append(make([]*entry[T], 0, 2*last), m.entries...)
	}
}

// buildNamespaceIndex builds the namespace index from the entries' own
// namespaces and keeps it from now on.
func (c *cache[T]) buildNamespaceIndex() {
	if c.nsIndexed {
		return
	}
	c.nsIndexed = true
	for _, e := range c.items {
		c.join(e)
	}
}

// inNamespace returns the entries of namespace ns (nil if the namespace
// index is not kept); the slice is the cache's own.
func (c *cache[T]) inNamespace(ns string) []*entry[T] {
	if m := c.byNS[ns]; m != nil {
		return m.entries
	}
	return nil
}

// grow adds n empty indices. Entries stored before have no values for them
// until fill is called; entries put afterwards must have values for all.
func (c *cache[T]) grow(n int) {
	for range n {
		c.indices = append(c.indices, map[string]keySet{})
	}
}

// fill gives the entry under key the values of the indices added by grow,
// and indexes it, if that entry is still the write numbered seq (a later
// write already carries them). It reports whether it did.
func (c *cache[T]) fill(key string, seq uint64, vals [][]string) bool {
	e := c.items[key]
	if e == nil || e.seq != seq {
		return false
	}
	first := e.indexes()
	e.vals = slices.Concat(e.vals, vals)
	for j, v := range vals {
		c.index(first+j, key, v)
	}
	return true
}

// shrink drops every index from position n on, and the values entries hold
// for them.
func (c *cache[T]) shrink(n int) {
	c.indices = c.indices[:n:n]
	for _, e := range c.items {
		if e.indexes() > n {
			e.vals = e.vals[: n-1 : n-1]
		}
	}
}

// objects returns the objects under keys.
func (c *cache[T]) objects(keys keySet) []T {
	out := make([]T, 0, len(keys))
	for key := range keys {
		out = append(out, c.items[key].obj)
	}
	return out
}

// objectsUnder returns the objects under value in index i.
func (c *cache[T]) objectsUnder(i int, value string) []T {
	if i > 0 {
		return c.objects(c.indices[i][value])
	}
	entries := c.inNamespace(value)
	out := make([]T, len(entries))
	for j, e := range entries {
		out[j] = e.obj
	}
	return out
}

// keysUnder returns the keys under value in index i. The namespace index
// holds entries, not keys: their keys are made again from the objects
// (an allocation each).
func (c *cache[T]) keysUnder(i int, value string) []string {
	if i > 0 {
		set := c.indices[i][value]
		return slices.AppendSeq(make([]string, 0, len(set)), maps.Keys(set))
	}
	entries := c.inNamespace(value)
	out := make([]string, len(entries))
	for j, e := range entries {
		out[j] = object.NameOf(e.obj).String()
	}
	return out
}

// valuesOf returns the values index i holds.
func (c *cache[T]) valuesOf(i int) []string {
	if i > 0 {
		return slices.AppendSeq(make([]string, 0, len(c.indices[i])), maps.Keys(c.indices[i]))
	}
	return slices.AppendSeq(make([]string, 0, len(c.byNS)), maps.Keys(c.byNS))
}

// checkInvariants returns an error describing the first broken invariant
// (see cache), or nil. It is for tests and fuzzers: it walks everything.
//
// ready is the number of indices that every entry must have values for (the
// others are being built).
func (c *cache[T]) checkInvariants(ready int) error {
	for _, e := range c.free {
		if e.key != "" || e.vals != nil || e.seq != 0 || e.gen != 0 {
			return fmt.Errorf("a free entry is not empty (key %q, seq %d)", e.key, e.seq)
		}
	}
	want := 0
	for key, e := range c.items {
		if e.key != key {
			return fmt.Errorf("item %q holds the key %q", key, e.key)
		}
		if e.indexes() != len(c.indices) && e.indexes() != ready {
			return fmt.Errorf("item %q has %d value lists, want %d (or %d while building)", key, e.indexes(), len(c.indices), ready)
		}
		if c.nsIndexed {
			if m := c.inNamespace(e.namespace()); e.at < 0 || int(e.at) >= len(m) || m[e.at] != e {
				return fmt.Errorf("item %q is not at its place (%d) in namespace %q's %d members", key, e.at, e.namespace(), len(m))
			}
		}
		for i, vals := range e.vals {
			for _, v := range vals {
				if _, ok := c.indices[i+1][v][key]; !ok {
					return fmt.Errorf("item %q is missing from index %d under %q", key, i+1, v)
				}
			}
			want += len(distinct(vals))
		}
	}
	if c.indices[0] != nil {
		return fmt.Errorf("indices[0] holds %d sets: the namespace index is byNS", len(c.indices[0]))
	}
	members := 0
	for ns, m := range c.byNS {
		if len(m.entries) == 0 {
			return fmt.Errorf("the namespace index keeps no member under %q", ns)
		}
		members += len(m.entries)
	}
	if n := len(c.items); c.nsIndexed && members != n {
		return fmt.Errorf("the namespace index holds %d members, the cache %d items", members, n)
	}
	if !c.nsIndexed && len(c.byNS) != 0 {
		return fmt.Errorf("the namespace index holds %d values before it was built", len(c.byNS))
	}
	got := 0
	for i, idx := range c.indices {
		for v, set := range idx {
			if len(set) == 0 {
				return fmt.Errorf("index %d keeps an empty set under %q", i, v)
			}
			got += len(set)
		}
	}
	if got != want {
		return fmt.Errorf("indices hold %d entries, items account for %d", got, want)
	}
	return nil
}

// distinct returns vals without repeats.
func distinct(vals []string) []string {
	out := slices.Clone(vals)
	slices.Sort(out)
	return slices.Compact(out)
}
