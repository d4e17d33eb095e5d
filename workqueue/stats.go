package workqueue

import (
	"sort"
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
	// bands, and a flow at its in-flight cap (Fairness.MaxInFlight) waits
	// out of the turns (its key is placed after every flow taking them, and
	// its keys are not counted before others'), so it is a guide, not a
	// promise.
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

// State returns where k is in the queue. Its cost grows with the flows of
// k's band, not with the keys queued (a few microseconds for 300,000 keys
// in 50 flows, BenchmarkQueue_State), but for flows holding keys that moved
// to a higher band, which it looks at key by key. Safe for concurrent use.
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
//
// It is called with the queue's lock held (State), so its cost must not
// grow with the depth: along a flow both parts of the pair grow, so where
// every element of a flow is live (no key of it moved to another band:
// the usual case) the count of its keys before k, and k's own place, are
// binary searches that look up no key. Only a flow holding dead elements
// is walked, looking each of its keys up. (Walking every flow so took the
// lock for 284 ms with 300,000 keys queued, once a second while the debug
// page explained a key, and the controller's adds waited for it.)
func (c *core[K]) placeInBand(b *band[K], k K, seq uint32) int {
	var mine place
	found := false
	for _, t := range b.ready.all() {
		f := t.f
		items := f.keys.Items()
		i := searchSeq(items, seq)
		if i < len(items) && items[i].seq == seq && items[i].key == k {
			mine, found = c.placeAt(b, f, items, i), true
			break
		}
	}
	n := 0
	for _, t := range b.ready.all() {
		f := t.f
		items := f.keys.Items()
		if !found { // k's flow is parked: it goes after every key of the flows taking turns
			n += f.live
			continue
		}
		if len(items) == f.live {
			n += sort.Search(len(items), func(i int) bool { return !c.placeAt(b, f, items, i).before(mine) })
			continue
		}
		j := f.served // the flow's quantum already used in its round
		for _, el := range items {
			if !b.holds(c.keys, el) {
				continue // dead: the key moved or was handed out
			}
			if b.placeOf(f, j, el.seq).before(mine) {
				n++
			}
			j++
		}
	}
	return n
}

// place is when a band hands a live element out: in its round, then by
// seq (pushes wrap around, so seqs compare by their difference).
type place struct {
	round uint64
	seq   uint32
}

func (p place) before(q place) bool {
	return p.round < q.round || p.round == q.round && int32(p.seq-q.seq) < 0
}

// placeAt returns the place of items[i], a live element of f's FIFO
// (items): its flow's round plus the quanta of the live keys before it
// and the flow's keys already served in this round.
func (c *core[K]) placeAt(b *band[K], f *flow[K], items []element[K], i int) place {
	j := f.served + i
	if len(items) != f.live {
		j = f.served
		for _, el := range items[:i] {
			if b.holds(c.keys, el) {
				j++
			}
		}
	}
	return b.placeOf(f, j, items[i].seq)
}

// placeOf is the place of f's live element seq with j live keys of f
// handed out or waiting before it in f's round (its served ones included).
func (b *band[K]) placeOf(f *flow[K], j int, seq uint32) place {
	return place{f.round + uint64(j/b.quantum), seq}
}

// searchSeq returns the index of the first of items (a flow's FIFO, in
// push order) pushed no earlier than seq, or len(items).
func searchSeq[K comparable](items []element[K], seq uint32) int {
	if len(items) == 0 {
		return 0
	}
	first := items[0].seq
	return sort.Search(len(items), func(i int) bool { return items[i].seq-first >= seq-first })
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
