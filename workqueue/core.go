package workqueue

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/peak"
)

// core is the queue's bookkeeping with no lock, no clock and no goroutine:
// which keys wait, in which band and flow, which are being processed, and
// which band's turn is next. Queue wraps it with a mutex and passes the time
// and each key's flow in.
//
// A key is in one of four states, told by its entry in keys:
//
//	idle        not in keys
//	queued      seq is its live element's (in band prio); never 0 or processingSeq
//	processing  seq == processingSeq
//	re-added    seq == 0: being processed and added since; prio is the band
//	            it joins at done, its flow is in readded
//
// One map for every state: a key's add, get and done each look it up once
// and write it at most once.
//
// Invariants (checked by checkInvariants):
//   - a queued key has exactly one live element: in band prio, in its flow,
//     with its seq;
//   - each band's age buckets count its elements, live and dead;
//   - active holds exactly the bands with live elements, highest priority
//     first; queued is the sum of their live counts; multi is
//     len(active) > 1;
//   - readded has exactly the re-added keys; processing counts the keys
//     processing or re-added;
//   - with a cap, inFlight counts them by flow, none above the cap, and a
//     parked flow is at the cap;
//   - when stamps is set, every queued and re-added key's entry is stamped
//     with when it became dirty, and the stamps' slots in use are exactly
//     those of the processing and re-added keys, each named by its key's
//     entry.
type core[K comparable] struct {
	keys       map[K]entry
	readded    map[K]string // the flow of each re-added key
	processing int          // keys processing or re-added

	bands  map[int]*band[K] // every band, empty ones until swept
	active []*band[K]       // bands with live elements, highest priority first
	hot    *band[K]         // the band pushed to last: skips the map for runs of one priority
	queued int              // live elements in all bands
	seq    uint32           // the last element's seq (0 before the first; never processingSeq)

	// Aging. A band's oldest key raises its effective priority by one
	// every step it waits, up to the highest active band's priority; the
	// bands at that priority take turns (lastPrio is the band served last).
	// Ages are measured against latest, the latest time core was given, so
	// core never reads a clock.
	step       time.Duration
	res        time.Duration // age buckets' width
	quantum    int           // keys a flow gets per round (band)
	latest     time.Time
	multiSince time.Time // when active last grew to two bands: the age of keys pushed at an unknown time
	lastPrio   int

	// multi is len(active) > 1, written under the queue's lock and read
	// without it by Queue.Add to decide whether to read the clock.
	multi atomic.Bool

	// With an in-flight cap per flow (Fairness.MaxInFlight): inFlight
	// counts the keys of each flow processing or re-added (flows with
	// none are not in it), and full reports whether a flow is at the cap.
	// full is nil without a cap, and nothing is counted.
	maxInFlight int
	inFlight    map[string]int
	full        func(flow string) bool

	// stamps records times for the metrics; nil when metrics are off.
	stamps *stamps[K]

	// The peaks of the maps keyed by K, rebuilt smaller once drained (the
	// initial list puts every key of a cache in keys at once).
	keysPeak, readdedPeak peak.Tracker
}

// processingSeq is the seq of a key's entry while it is processed and not
// added since; no element has it.
const processingSeq = math.MaxUint32

// entry is what core knows about a key: 24 bytes, as the keys map holds one
// per key waiting or being processed.
//
// seq wraps around after 2^32 - 2 pushes. An element left dead by a key
// that moved up could then, in theory, match the key's entry again; the
// check in band.next also compares the band, so the worst case is that the
// key is handed out from its older place in the same flow, which breaks no
// guarantee.
type entry struct {
	seq  uint32 // its live element's seq (queued), 0 (re-added) or processingSeq
	prio int32  // its band (queued), or the band it joins at done (re-added)
	// dirtied is when it became dirty (queued, re-added), as time since
	// the stamps' base; 0 without stamps. Kept here, not in a map of its
	// own: an add writes it with the entry it writes anyway, and a get
	// reads it with one lookup instead of a lookup and a delete.
	dirtied time.Duration
	// slot is the key's slot in the stamps' procs while it is processing
	// or re-added; 0 otherwise, and without stamps.
	slot int32
}

// stamps are the times core keeps for metrics, besides the entries' dirtied.
type stamps[K comparable] struct {
	base time.Time // what entries' dirtied count from: just before the first stamp
	// procs holds, for each key processing or re-added, when it was handed
	// out, in the slot its entry names: a get and a done touch it by index,
	// not through a second map keyed by K, and the in-flight metrics read
	// as many slots as keys were ever processed at once. free lists the
	// slots not in use.
	procs []proc[K]
	free  []int32
	used  int // slots in use
}

// maxIdleProcs is how many slots stamps keep once no key is processing:
// more, left by a burst of keys handed out at once, are dropped then.
const maxIdleProcs = 64

// proc is a slot of stamps.procs.
type proc[K comparable] struct {
	key     K
	started time.Time
	used    bool
}

// take puts k, handed out at now, in a free slot and returns its index.
func (s *stamps[K]) take(k K, now time.Time) int32 {
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		i = int32(len(s.procs))
		s.procs = append(s.procs, proc[K]{})
	}
	s.procs[i] = proc[K]{key: k, started: now, used: true}
	s.used++
	return i
}

// release frees slot i and returns when its key was handed out.
func (s *stamps[K]) release(i int32) time.Time {
	started := s.procs[i].started
	s.procs[i] = proc[K]{} // the key is not kept alive
	s.free = append(s.free, i)
	if s.used--; s.used == 0 && len(s.procs) > maxIdleProcs {
		s.procs, s.free = nil, nil
	}
	return started
}

// dirtied returns when an entry stamped d became dirty.
func (s *stamps[K]) dirtied(d time.Duration) time.Time { return s.base.Add(d) }

// init readies an empty core; with timed set it keeps stamps. step is the
// aging step (> 0), quantum the keys a flow gets per round (> 0),
// maxInFlight the keys of a flow processed at once (0: no cap).
func (c *core[K]) init(timed bool, step time.Duration, quantum, maxInFlight int) {
	c.keys, c.readded = map[K]entry{}, map[K]string{}
	if maxInFlight > 0 {
		c.maxInFlight, c.inFlight = maxInFlight, map[string]int{}
		c.full = func(flow string) bool { return c.inFlight[flow] >= c.maxInFlight }
	}
	c.bands = map[int]*band[K]{}
	c.step, c.res, c.quantum = step, max(step/16, 1), quantum
	if timed {
		c.stamps = &stamps[K]{}
	}
}

// add marks k, of flow, as needing processing at priority prio. It reports
// whether k became dirty (it was not already waiting) and whether it went
// into a band (it is not being processed), which is when a waiting worker
// should be woken. A key already waiting keeps the higher priority.
// now is zero when the caller did not read the clock.
func (c *core[K]) add(k K, prio int32, flow string, now time.Time) (dirtied, queued bool) {
	c.see(now)
	e, ok := c.keys[k]
	switch {
	case !ok:
		c.keys[k] = c.push(k, prio, flow, now, c.stamp(now))
		c.keysPeak.Grew(len(c.keys))
		return true, true
	case e.seq == processingSeq:
		c.keys[k] = entry{prio: prio, dirtied: c.stamp(now), slot: e.slot}
		c.readded[k] = flow
		c.readdedPeak.Grew(len(c.readded))
		return true, false
	case prio <= e.prio:
	case e.seq == 0: // re-added: joins the higher band at done
		e.prio = prio
		c.keys[k] = e
	default: // queued: moves to the higher band, to the back of its flow
		b := c.bands[int(e.prio)]
		b.kill(flow)
		c.queued--
		c.emptied(b)
		c.keys[k] = c.push(k, prio, flow, now, e.dirtied)
	}
	return false, false
}

// maxReserve bounds what reserve makes room for: a hint far off the mark
// (a list's remaining count is the server's estimate) costs at most a
// table of this many keys.
const maxReserve = 1 << 20

// reserve makes room in keys for n more than it holds: one table built at
// its size instead of one rebuilt at every doubling. A map whose table
// already held that many (its peak) is left as it is. The room counts as a
// peak, so the map is rebuilt small as any peak's is: once it has stayed
// under an eighth of it for half as many deletes (internal/peak), whether
// the keys came or not.
func (c *core[K]) reserve(n int) {
	n = min(n, maxReserve)
	if n <= 0 || c.keysPeak.Peak() >= len(c.keys)+n {
		return
	}
	m := make(map[K]entry, len(c.keys)+n)
	maps.Copy(m, c.keys)
	c.keys = m
	c.keysPeak.Grew(len(c.keys) + n)
}

// stamp returns now as an entry's dirtied, counted from the stamps' base,
// which the first stamp sets just before now, so that a stamp is never 0
// (for a clock that does not go back); 0 without stamps.
func (c *core[K]) stamp(now time.Time) time.Duration {
	if c.stamps == nil {
		return 0
	}
	if c.stamps.base.IsZero() {
		c.stamps.base = now.Add(-time.Nanosecond)
	}
	return now.Sub(c.stamps.base)
}

// push appends k to its flow in band prio and returns its entry, stamped
// dirtied.
func (c *core[K]) push(k K, prio int32, flow string, at time.Time, dirtied time.Duration) entry {
	b := c.hot
	if b == nil || b.prio != int(prio) {
		b = c.band(int(prio))
	}
	if b.live == 0 {
		if at.IsZero() && len(c.active) > 0 {
			at = c.latest // another band is waiting, so this band's age will matter
		}
		c.activate(b, at)
	}
	c.seq++
	if c.seq == processingSeq {
		c.seq = 1
	}
	c.queued++
	b.push(k, flow, c.seq, at, c.res)
	return entry{prio: prio, seq: c.seq, dirtied: dirtied}
}

// get hands out the next key and moves it to processing. It returns when
// the key became dirty (zero without stamps) and ok=false when nothing is
// queued, or every queued key's flow is at its in-flight cap. When the
// band whose turn it is holds only such flows, the next active band that
// holds another serves.
func (c *core[K]) get(now time.Time) (k K, since time.Time, ok bool) {
	if c.queued == 0 {
		return k, since, false
	}
	c.see(now)
	b := c.pick()
	el, f, ok := b.next(c.keys, c.full)
	for _, o := range c.active {
		if ok {
			break
		}
		if o != b {
			if el, f, ok = o.next(c.keys, c.full); ok {
				b = o
			}
		}
	}
	if !ok {
		return k, since, false
	}
	if c.full != nil {
		c.inFlight[f.name]++
	}
	k = el.key
	c.queued--
	c.lastPrio = b.prio
	c.emptied(b)
	if c.stamps != nil {
		since = c.stamps.dirtied(c.keys[k].dirtied)
		c.keys[k] = entry{seq: processingSeq, slot: c.stamps.take(k, now)}
	} else {
		c.keys[k] = entry{seq: processingSeq}
	}
	c.processing++
	return k, since, true
}

// done ends the processing of k, of flow (used only with an in-flight
// cap). A key that was re-added meanwhile goes back into its band, and a
// flow parked at its cap goes back into the turns: wake reports a key a
// waiting worker can get (re-added, or of a flow that was at its cap). ok
// is false, and nothing changes, when k was not being processed. started
// is when get handed k out (zero without stamps).
func (c *core[K]) done(k K, flow string, now time.Time) (started time.Time, wake, ok bool) {
	e, ok := c.keys[k]
	if !ok || (e.seq != processingSeq && e.seq != 0) {
		return started, false, false
	}
	c.processing--
	c.see(now)
	if c.full != nil {
		if re, ok := c.readded[k]; ok {
			flow = re
		}
		wake = c.landed(flow)
	}
	if c.stamps != nil {
		started = c.stamps.release(e.slot)
	}
	if e.seq == processingSeq {
		delete(c.keys, k)
		c.keys = peak.Shrink(&c.keysPeak, c.keys)
		return started, wake, true
	}
	flow = c.readded[k]
	delete(c.readded, k)
	c.readded = peak.Shrink(&c.readdedPeak, c.readded)
	c.keys[k] = c.push(k, e.prio, flow, now, e.dirtied)
	return started, true, true
}

// landed counts a key of flow out of flight and, if that takes the flow
// below its cap, puts it back into the turns of the bands where it is
// parked. It reports whether the flow has keys queued then: a worker
// waiting may get one (an add to a flow at its cap wakes nobody).
func (c *core[K]) landed(flow string) (wake bool) {
	n := c.inFlight[flow] - 1
	if n > 0 {
		c.inFlight[flow] = n
	} else {
		delete(c.inFlight, flow)
	}
	if n != c.maxInFlight-1 {
		return false
	}
	for _, b := range c.active {
		if f := b.flows[flow]; f != nil && (f.parked || f.inReady) {
			wake = true
			if f.parked {
				b.unpark(flow)
			}
		}
	}
	return wake
}

// pick returns the band whose turn it is. The highest active band always
// takes part in the turns; a lower band takes part once its oldest key has
// waited the aging step times the difference in priority. The bands taking
// part are served one key each, highest first, then round again.
func (c *core[K]) pick() *band[K] {
	top := c.active[0]
	if len(c.active) == 1 || top.prio < c.lastPrio {
		return top
	}
	for _, b := range c.active[1:] {
		if b.prio < c.lastPrio && c.overdue(b, top.prio) {
			return b
		}
	}
	return top
}

// overdue reports whether b's oldest key has aged up to priority top.
func (c *core[K]) overdue(b *band[K], top int) bool {
	at, _ := b.ages.oldest()
	if at.IsZero() {
		at = c.multiSince
	}
	return c.latest.Sub(at) >= c.agingWait(top, b.prio)
}

// agingWait is how long a key of priority low waits to age up to high, with
// no overflow whatever the priorities.
func (c *core[K]) agingWait(high, low int) time.Duration {
	d := uint64(high) - uint64(low) // exact: high > low
	if d > uint64(math.MaxInt64/c.step) {
		return math.MaxInt64
	}
	return time.Duration(d) * c.step
}

// see moves latest forward to now.
func (c *core[K]) see(now time.Time) {
	if now.After(c.latest) {
		c.latest = now
	}
}

// band returns band prio, creating it if need be.
func (c *core[K]) band(prio int) *band[K] {
	b := c.bands[prio]
	if b == nil {
		c.sweepBands()
		b = newBand[K](prio, c.quantum)
		c.bands[prio] = b
	}
	c.hot = b
	return b
}

// sweepBands drops the empty bands once there are many: priorities are
// meant to be a few bands, but a caller may use many values.
func (c *core[K]) sweepBands() {
	if len(c.bands)-len(c.active) <= sweepIdle || len(c.bands)-len(c.active) < len(c.bands)/2 {
		return
	}
	for p, b := range c.bands {
		if b.live == 0 {
			delete(c.bands, p)
		}
	}
	c.hot = nil
}

// activate adds b, which is about to receive its first live element (at
// time at), to active.
func (c *core[K]) activate(b *band[K], at time.Time) {
	i, _ := slices.BinarySearchFunc(c.active, b.prio, func(a *band[K], p int) int { return cmp.Compare(p, a.prio) })
	c.active = slices.Insert(c.active, i, b)
	if len(c.active) == 2 {
		c.multiSince = at
		c.multi.Store(true)
	}
}

// emptied resets b and removes it from active if it has no live element
// left.
func (c *core[K]) emptied(b *band[K]) {
	if b.live > 0 {
		return
	}
	b.reset()
	c.active = slices.DeleteFunc(c.active, func(a *band[K]) bool { return a == b })
	if len(c.active) == 1 {
		c.multi.Store(false)
	}
}

// idle reports whether nothing is queued, re-added or being processed.
func (c *core[K]) idle() bool { return len(c.keys) == 0 }

// dirty is the number of keys waiting: queued or re-added.
func (c *core[K]) dirty() int { return c.queued + len(c.readded) }

// bandStates describes the bands holding keys, highest priority first.
func (c *core[K]) bandStates() []BandState {
	states := make([]BandState, 0, len(c.active))
	for _, b := range c.active {
		at, _ := b.ages.oldest()
		states = append(states, BandState{Priority: b.prio, Depth: b.live, Oldest: at})
	}
	return states
}
