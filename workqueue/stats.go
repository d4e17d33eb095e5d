package workqueue

import "time"

// Stats is a snapshot of a queue. Times come from the bookkeeping the
// queue keeps for its metrics: without Options.Metrics they are zero.
type Stats[K comparable] struct {
	// Depth is the number of keys waiting for a worker (Len).
	Depth int
	// Bands splits Depth by priority band. Today a queue has one band,
	// named "default".
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

// BandStats is the depth of one priority band.
type BandStats struct {
	Name  string
	Depth int
}

// KeyTime is a key and a moment: when it was queued, or handed out.
type KeyTime[K comparable] struct {
	Key   K
	Since time.Time
}

// KeyState is where one key is in a queue.
type KeyState struct {
	// Queued reports that the key waits for a worker; Position is then its
	// place in line (0: next) and Since when it was queued.
	Queued   bool
	Position int
	// Processing reports that a worker holds the key; Since is then when
	// it was handed out. Redirtied reports that it was added again
	// meanwhile (it is queued again at Done).
	Processing bool
	Redirtied  bool
	Since      time.Time
}

// Stats returns a snapshot of the queue. It holds the queue's lock for a
// time that grows with the number of keys being processed (the workers),
// not with the depth. Safe for concurrent use.
func (q *Queue[K]) Stats() Stats[K] {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.core
	st := Stats[K]{Depth: c.queued(), ShuttingDown: q.shuttingDown,
		Redirtied: len(c.dirty) - c.queued(), Processing: make([]KeyTime[K], 0, len(c.processing))}
	st.Bands = []BandStats{{Name: "default", Depth: st.Depth}}
	if st.Depth > 0 {
		k := c.order.items()[0]
		st.Oldest = &KeyTime[K]{Key: k, Since: c.stampOf(k, false)}
	}
	for k := range c.processing {
		st.Processing = append(st.Processing, KeyTime[K]{Key: k, Since: c.stampOf(k, true)})
	}
	return st
}

// State returns where k is in the queue. It scans the queued keys to find
// k's position: meant for inspecting one key, not for a hot path. Safe for
// concurrent use.
func (q *Queue[K]) State(k K) KeyState {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.core
	_, dirty := c.dirty[k]
	if _, ok := c.processing[k]; ok {
		return KeyState{Processing: true, Redirtied: dirty, Since: c.stampOf(k, true)}
	}
	if !dirty {
		return KeyState{}
	}
	for pos, x := range c.order.items() {
		if x == k {
			return KeyState{Queued: true, Position: pos, Since: c.stampOf(k, false)}
		}
	}
	return KeyState{} // unreachable while the invariants hold
}

// stampOf returns when k started processing (started) or became dirty; zero
// without stamps.
func (c *core[K]) stampOf(k K, started bool) time.Time {
	if c.stamps == nil {
		return time.Time{}
	}
	if started {
		return c.stamps.started[k]
	}
	return c.stamps.dirtied[k]
}
