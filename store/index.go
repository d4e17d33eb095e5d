package store

import (
	"fmt"
	"slices"

	"github.com/ctrlkit/ctrlkit/object"
)

// keySet is a set of store keys.
type keySet map[string]struct{}

// entry is a stored object with the index values computed for it when it
// was written, so that removing or replacing it never calls an index
// function again.
//
// Entries are held by pointer and updated in place under the store's lock:
// a write finds its entry with one lookup (and assigns it back to keep the
// writer's key string, see put). The namespace index's value is held in the
// entry itself: a store with no other index allocates one 64-byte entry per
// object, and with interned namespaces a write checks that the namespace
// did not change without leaving the entry's cache line.
type entry[T object.Object] struct {
	obj  T
	ns   string     // the value of the namespace index (position 0)
	vals [][]string // vals[i]: the values of index function i+1
	seq  uint64     // the write that stored it; see Indexer.AddIndexers
	gen  uint64     // the relist generation it was written in; see Indexer.BeginRelist
}

// values returns the values of index i of e.
func (e *entry[T]) values(i int) []string {
	if i == 0 {
		return []string{e.ns}
	}
	return e.vals[i-1]
}

// indexes returns the number of indexes e has values for.
func (e *entry[T]) indexes() int { return 1 + len(e.vals) }

// cache is the index bookkeeping: objects by key and, for each index, keys
// by value. It is a plain type with no lock and calls no user code; Indexer
// wraps it with a lock and computes index values before calling it.
//
// Invariants (checked by checkInvariants):
//   - every entry has one value list per index, e.indexes() ==
//     len(indices), except while AddIndexers builds new indices: entries
//     stored before grow have none for them until fill;
//   - indices[i][v] contains k exactly when items[k].values(i) contains v,
//     except that the namespace index (i == 0) is empty until nsIndexed:
//     it is built at its first read (see buildNamespaceIndex);
//   - no index holds an empty set, so values that no object carries any more
//     leave no trace (high-cardinality values do not leak memory).
type cache[T object.Object] struct {
	items   map[string]*entry[T]
	indices []map[string]keySet
	// nsIndexed says whether indices[0], the namespace index, is kept. It
	// is not until something reads it: entries hold their namespace, so
	// the index can be built at once when first asked for, and a store
	// nobody queries by namespace (a namespaced informer, a controller
	// reading by key) never pays a second map insert per object for it,
	// nor its memory.
	nsIndexed bool
}

// newCache returns an empty cache with n indices, sized for size items.
func newCache[T object.Object](n, size int) *cache[T] {
	c := &cache[T]{items: make(map[string]*entry[T], size), indices: make([]map[string]keySet, n)}
	for i := range c.indices {
		c.indices[i] = map[string]keySet{}
	}
	return c
}

// put stores e under key, replacing and unindexing any previous entry, and
// returns the previous object. Index value lists equal to the previous
// entry's are shared with it rather than kept twice, and an entry whose
// values all stay the same is updated in place, allocating nothing. The
// map then holds key's string, the caller's: the informer hands the same
// string on to handlers and the queue, so the worker's read by it (when
// the queue did not already hold the key) finds the entry comparing
// pointers instead of the bytes of another copy. The price: the index
// sets keep the key string of the object's first write, so an object
// written again keeps two copies of its key alive (about 32 bytes).
func (c *cache[T]) put(key string, e entry[T]) (old T, had bool) {
	prev := c.items[key]
	if prev == nil {
		stored := new(entry[T]) // only here: e itself does not escape
		*stored = e
		c.items[key] = stored
		c.indexAll(key, stored)
		return old, false
	}
	old = prev.obj
	if prev.ns == e.ns && sameValues(prev.vals, e.vals) {
		prev.obj, prev.seq, prev.gen = e.obj, e.seq, e.gen
		c.items[key] = prev // keep key's string (see above)
		return old, true
	}
	if prev.ns != e.ns { // not through Indexer, whose keys fix the namespace; a cache is kept consistent anyway
		c.unindex(0, key, []string{prev.ns})
		c.index(0, key, []string{e.ns})
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
	*prev = e
	c.items[key] = prev
	return old, true
}

// indexAll adds key to every index under e's values.
func (c *cache[T]) indexAll(key string, e *entry[T]) {
	for i := range e.indexes() {
		c.index(i, key, e.values(i))
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
	for i := range e.indexes() {
		c.unindex(i, key, e.values(i))
	}
	old = e.obj
	*e = entry[T]{} // it may sit in a slab that outlives it: drop what it holds
	return old, true
}

func (c *cache[T]) index(i int, key string, vals []string) {
	if i == 0 && !c.nsIndexed {
		return
	}
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

func (c *cache[T]) unindex(i int, key string, vals []string) {
	if i == 0 && !c.nsIndexed {
		return
	}
	idx := c.indices[i]
	for _, v := range vals {
		set := idx[v]
		delete(set, key)
		if len(set) == 0 {
			delete(idx, v)
		}
	}
}

// buildNamespaceIndex builds the namespace index from the entries' own
// namespaces and keeps it from now on.
func (c *cache[T]) buildNamespaceIndex() {
	if c.nsIndexed {
		return
	}
	idx := c.indices[0]
	var set keySet
	var last string
	for key, e := range c.items {
		if set == nil || e.ns != last {
			if set = idx[e.ns]; set == nil {
				set = keySet{}
				idx[e.ns] = set
			}
			last = e.ns
		}
		set[key] = struct{}{}
	}
	c.nsIndexed = true
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

// checkInvariants returns an error describing the first broken invariant
// (see cache), or nil. It is for tests and fuzzers: it walks everything.
//
// ready is the number of indices that every entry must have values for (the
// others are being built).
func (c *cache[T]) checkInvariants(ready int) error {
	want := 0
	for key, e := range c.items {
		if e.indexes() != len(c.indices) && e.indexes() != ready {
			return fmt.Errorf("item %q has %d value lists, want %d (or %d while building)", key, e.indexes(), len(c.indices), ready)
		}
		for i := range e.indexes() {
			if i == 0 && !c.nsIndexed {
				continue
			}
			vals := e.values(i)
			for _, v := range vals {
				if _, ok := c.indices[i][v][key]; !ok {
					return fmt.Errorf("item %q is missing from index %d under %q", key, i, v)
				}
			}
			want += len(distinct(vals))
		}
	}
	if !c.nsIndexed && len(c.indices[0]) != 0 {
		return fmt.Errorf("the namespace index holds %d values before it was built", len(c.indices[0]))
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
