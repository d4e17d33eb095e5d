// Package peak keeps a map that emptied after a burst from holding on to
// the room it grew to. A Go map never gives back its table: a work queue
// that once held every key of a 100,000-object cache (a controller's
// initial list) keeps a table that size for the life of the process, a few
// megabytes that every later lookup lands in, missing the CPU's caches. A
// map tracked here is rebuilt at its size once it holds less than an
// eighth of the most it held, which costs, spread over the deletes since
// then, a constant per delete.
package peak

// MinPeak is the smallest peak worth a rebuild: a table for fewer entries
// takes a few kilobytes and stays in cache.
const MinPeak = 1024

// Tracker follows the largest size one map reached since it was last
// rebuilt. The zero value is ready. Not safe for concurrent use: it goes
// with its map, under the same lock.
type Tracker struct {
	peak int
}

// Grew records the map's size after an insert.
func (t *Tracker) Grew(size int) {
	if size > t.peak {
		t.peak = size
	}
}

// Peak returns the largest size recorded since the map was last rebuilt.
func (t *Tracker) Peak() int { return t.peak }

// Shrink returns m itself or, when m holds less than an eighth of its
// peak of at least MinPeak entries, a new map with m's entries sized for
// them. Call it after a delete and keep the map it returns.
func Shrink[M ~map[K]V, K comparable, V any](t *Tracker, m M) M {
	if t.peak < MinPeak || len(m) >= t.peak/8 {
		return m
	}
	n := make(M, len(m))
	for k, v := range m {
		n[k] = v
	}
	t.peak = len(m)
	return n
}
