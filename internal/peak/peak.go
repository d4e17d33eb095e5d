// Package peak keeps a map that emptied after a burst from holding on to
// the room it grew to. A Go map never gives back its table: a work queue
// that once held every key of a 100,000-object cache (a controller's
// initial list) keeps a table that size for the life of the process, a few
// megabytes that every later lookup lands in, missing the CPU's caches. A
// map tracked here is rebuilt at its size once it has held less than an
// eighth of the most it held for as many deletes as half that peak: a map
// that swings between large and small (a backlog that comes and goes) is
// left alone, and a rebuild's cost, spread over those deletes, is a
// constant per delete.
package peak

// MinPeak is the smallest peak worth a rebuild: a table for fewer entries
// takes a few hundred kilobytes at most and stays in the CPU's caches.
const MinPeak = 4096

// Tracker follows one map's largest size since it was last rebuilt, and
// for how many deletes it has been small. The zero value is ready. Not
// safe for concurrent use: it goes with its map, under the same lock.
type Tracker struct {
	peak int
	low  int // deletes in a row that left the map below peak/8
}

// Grew records the map's size after an insert.
func (t *Tracker) Grew(size int) {
	if size > t.peak {
		t.peak = size
	}
	if size >= t.peak/8 {
		t.low = 0
	}
}

// Peak returns the largest size recorded since the map was last rebuilt.
func (t *Tracker) Peak() int { return t.peak }

// Clear returns m emptied: a new map when m's peak reached MinPeak (clear
// would keep the table, and takes time in proportion to it), else m
// itself, cleared.
func Clear[M ~map[K]V, K comparable, V any](t *Tracker, m M) M {
	if t.peak >= MinPeak {
		*t = Tracker{}
		return make(M)
	}
	clear(m)
	t.low = 0
	return m
}

// Shrink returns m itself or, once m has stayed below an eighth of a peak
// of at least MinPeak entries for peak/2 deletes, a new map with m's
// entries sized for them. Call it after each delete and keep the map it
// returns.
func Shrink[M ~map[K]V, K comparable, V any](t *Tracker, m M) M {
	if t.peak < MinPeak || len(m) >= t.peak/8 {
		t.low = 0
		return m
	}
	if t.low++; t.low < t.peak/2 {
		return m
	}
	n := make(M, len(m))
	for k, v := range m {
		n[k] = v
	}
	t.peak, t.low = len(m), 0
	return n
}
