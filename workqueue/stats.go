package workqueue

import (
	"strconv"
	"time"
)

// Stats is a snapshot of a queue. Times come from the bookkeeping the
// queue keeps for its metrics: without Options.Registerer they are zero.
type Stats[K comparable] struct {
	// Depth is the number of keys waiting for a worker (Len).
	Depth int
	// Bands splits Depth by priority band, highest priority first: the
	// bands that hold keys.
	Bands []BandStats
	// Oldest is the key that has waited longest, when Depth > 0.
	Oldest *KeyTime[K]
	// Processing are the keys handed out and not yet Done, each with when
	// it was handed out, in no particular order.
	Processing []KeyTime[K]
	// Redirtied is the number of keys added again while being processed:
	// they wait for Done, then for a worker.
	Redirtied int
	// ShuttingDown reports ShutDown.
	ShuttingDown bool
}

// BandStats is one priority band: its priority (also as Name), its depth
// and when its oldest key was queued (zero when the queue did not read the
// clock for it; see BandState).
type BandStats struct {
	Name     string
	Priority int
	Depth    int
	Oldest   time.Time
}

// KeyTime is a key and a moment: when it was queued, or handed out.
type KeyTime[K comparable] struct {
	Key   K
	Since time.Time
}

// KeyState is where one key is in a queue.
type KeyState struct {
	// Queued reports that the key waits for a worker; Since is then when it
	// became dirty (its add, or its add while it was processed, not the
	// requeue at Done) and Position its place in line (0: next): every key of the
	// higher bands, then the keys its band hands out before it, round by
	// round, if no key is added meanwhile. Aging may let it overtake higher
	// bands, so it is a guide, not a promise.
	Queued   bool
	Position int
	// Processing reports that a worker holds the key; Since is then when
	// it was handed out. Redirtied reports that it was added again
	// meanwhile (it is queued again at Done).
	Processing bool
	Redirtied  bool
	Since      time.Time
}

// Stats returns a snapshot of the queue. With metrics (Options.Registerer)
// it holds the queue's lock for a time that grows with the number of keys
// being processed (the workers), not with the depth; without, it looks at
// every key waiting too. Safe for concurrent use.
func (q *Queue[K]) Stats() Stats[K] {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.core
	st := Stats[K]{Depth: c.queued, ShuttingDown: q.shuttingDown,
		Redirtied: len(c.readded), Processing: make([]KeyTime[K], 0, c.processing)}
	for _, b := range c.bandStates() {
		st.Bands = append(st.Bands, BandStats{Name: strconv.Itoa(b.Priority), Priority: b.Priority, Depth: b.Depth, Oldest: b.Oldest})
	}
	// The oldest key is at the head of one of the flows: look at those only.
	for _, b := range c.active {
		for _, t := range b.ready.all() {
			if k, ok := c.head(t.f); ok {
				since := c.stampOf(k, false)
				if st.Oldest == nil || since.Before(st.Oldest.Since) {
					st.Oldest = &KeyTime[K]{Key: k, Since: since}
				}
			}
		}
	}
	if c.stamps != nil {
		for _, p := range c.stamps.procs {
			if p.used {
				st.Processing = append(st.Processing, KeyTime[K]{Key: p.key, Since: p.started})
			}
		}
		return st
	}
	for k, e := range c.keys {
		if e.seq == 0 || e.seq == processingSeq {
			st.Processing = append(st.Processing, KeyTime[K]{Key: k})
		}
	}
	return st
}

// head returns the first live key of f.
func (c *core[K]) head(f *flow[K]) (K, bool) {
	for _, el := range f.keys.Items() {
		if e, ok := c.keys[el.key]; ok && e.seq == el.seq {
			return el.key, true
		}
	}
	var zero K
	return zero, false
}

// State returns where k is in the queue. It scans the queued keys of k's
// band: meant for inspecting one key, not for a hot path. Safe for
// concurrent use.
func (q *Queue[K]) State(k K) KeyState {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.core
	e, ok := c.keys[k]
	switch {
	case !ok:
		return KeyState{}
	case e.seq == 0 || e.seq == processingSeq:
		return KeyState{Processing: true, Redirtied: e.seq == 0, Since: c.stampOf(k, true)}
	}
	ahead := 0
	for _, b := range c.active {
		if b.prio > int(e.prio) {
			ahead += b.live
		}
		if b.prio == int(e.prio) {
			return KeyState{Queued: true, Position: ahead + c.placeInBand(b, k, e.seq), Since: c.stampOf(k, false)}
		}
	}
	return KeyState{} // unreachable while the invariants hold
}

// placeInBand returns how many of b's live keys go out before k, whose
// live element has seq. The band hands its keys out in order of (round,
// seq), a key's round being its flow's round plus how many quanta of its
// flow go before it, so that is how many live keys have a smaller pair.
func (c *core[K]) placeInBand(b *band[K], k K, seq uint32) int {
	type place struct {
		round uint64
		seq   uint32
	}
	var places []place
	var mine place
	for _, t := range b.ready.all() {
		f := t.f
		j := f.served // the flow's quantum already used in its round
		for _, el := range f.keys.Items() {
			if x, ok := c.keys[el.key]; !ok || x.seq != el.seq || int(x.prio) != b.prio {
				continue // dead: the key moved or was handed out
			}
			p := place{f.round + uint64(j/b.quantum), el.seq}
			if el.key == k && el.seq == seq {
				mine = p
			}
			places = append(places, p)
			j++
		}
	}
	n := 0
	for _, p := range places {
		if p.round < mine.round || p.round == mine.round && int32(p.seq-mine.seq) < 0 {
			n++
		}
	}
	return n
}

// stampOf returns when k started processing (started) or became dirty; zero
// without stamps.
func (c *core[K]) stampOf(k K, started bool) time.Time {
	if c.stamps == nil {
		return time.Time{}
	}
	if started {
		if e, ok := c.keys[k]; ok && (e.seq == 0 || e.seq == processingSeq) {
			return c.stamps.procs[e.slot].started
		}
		return time.Time{}
	}
	return c.stamps.dirtied(c.keys[k].dirtied)
}
