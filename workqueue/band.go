package workqueue

import (
	"iter"
	"slices"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/fifo"
)

// element is a key's place in a flow. seq tells a live element from a dead
// one: a key's entry names the seq of its one live element, so an element
// left behind when the key moved to a higher band (or was handed out and
// queued again) no longer matches and is skipped when it comes up.
type element[K comparable] struct {
	key    K
	seq    uint32
	bucket uint32 // its age bucket, uncounted when the element is popped
}

// flow is one flow's FIFO within a band: the keys of one namespace (by
// default) at one priority, oldest first, and its place in the band's
// rounds.
type flow[K comparable] struct {
	name    string
	keys    fifo.Queue[element[K]]
	live    int    // live elements in keys
	round   uint64 // the round its next key goes out in
	served  int    // live keys handed out in round (< the band's quantum)
	inReady bool   // in band.ready
	// parked: out of ready while the flow has as many keys in flight as
	// the queue's MaxInFlight; in band.parked. A flow holds elements
	// exactly when it is in ready or parked, never both.
	parked bool
}

// turn is a flow's place in a band's ready: its round and the seq of its
// first element, copied so that ordering them reads no flow.
type turn[K comparable] struct {
	round uint64
	head  uint32
	f     *flow[K]
}

// before orders turns: the earlier round first, then the earlier head in
// arrival order. Seqs wrap around, so they are compared by their
// difference: right as long as the band's elements span fewer than 2^31
// pushes.
func (t turn[K]) before(u turn[K]) bool {
	if t.round != u.round {
		return t.round < u.round
	}
	return int32(t.head-u.head) < 0
}

// band holds the queued keys of one priority: one FIFO per flow, handed out
// in rounds. In a round each flow with keys gets up to quantum of them, and
// the keys of a round go out in the order they were pushed; a flow that had
// its quantum waits for the next round, which starts once no flow has keys
// left in this one. So keys go out in the order they were pushed except
// where a flow had its share of a round, and the key at the head of a flow
// waits for at most 2 * quantum keys of every other flow (this round's
// and, if its own flow had its share of this round already, the next
// one's), however many those hold.
//
// ready holds the flows holding elements, ordered by (round, head seq):
// taking the first hands keys out in that order, a merge of the flows'
// FIFOs. A flow that gets its first element joins the current round
// (the round of the last key handed out), or stays in a later one it
// already reached, so going idle and coming back gains it nothing. Once
// the band is empty every flow starts afresh: nobody was waiting.
//
// A flow with as many keys in flight as the queue allows (MaxInFlight) is
// parked when its turn comes: taken out of ready into parked, its keys
// kept, until one of its keys is done (core.landed, band.unpark); it then joins the
// current round as a flow coming back from idle does.
//
// Invariants (checked by core.checkInvariants): ready holds exactly the
// flows whose keys are not empty and that are not parked, once each,
// with their round and head, in a round from round to top, with served <
// quantum; parked holds exactly the flows marked parked; idle counts the
// flows of flows neither in ready nor parked; live is
// the sum of the flows' live counts and of the ages buckets' counts; a
// band with no live element holds no element at all (reset empties it).
type band[K comparable] struct {
	prio    int
	quantum int
	live    int
	round   uint64              // the round of the last key handed out
	top     uint64              // the latest round a flow has reached
	flows   map[string]*flow[K] // every flow of the band; idle ones until swept
	ready   ready[K]            // flows holding elements, by turn, but those parked
	parked  []*flow[K]          // flows at their in-flight cap holding elements: a few (each has keys in flight)
	idle    int                 // flows neither in ready nor parked
	kept    int                 // idle flows the last sweep kept
	last    *flow[K]            // the flow pushed to last: skips the map for runs of one flow
	ages    ages                // when the live elements were pushed, coarsely
}

// sweepIdle is how many idle flows a band keeps before it drops them, as
// long as they are also at least half of its flows: namespaces come and go,
// and a long-lived queue must not remember each one forever.
const sweepIdle = 1024

func newBand[K comparable](prio, quantum int) *band[K] {
	return &band[K]{prio: prio, quantum: quantum, flows: map[string]*flow[K]{}}
}

// push appends k to flow name's FIFO as a live element and counts it in the
// age bucket of at.
func (b *band[K]) push(k K, name string, seq uint32, at time.Time, res time.Duration) {
	f := b.last
	if f == nil || f.name != name {
		f = b.flows[name]
		if f == nil {
			f = &flow[K]{name: name}
			b.flows[name] = f
			b.idle++
		}
		b.last = f
	}
	f.keys.Push(element[K]{key: k, seq: seq, bucket: b.ages.add(at, res)})
	f.live++
	b.live++
	if !f.inReady && !f.parked {
		b.idle--
		b.enter(f)
	}
}

// enter puts f, which holds elements and is neither in ready nor parked,
// into ready: in the current round, or the later one it already reached.
func (b *band[K]) enter(f *flow[K]) {
	if f.round < b.round {
		f.round, f.served = b.round, 0
	}
	f.inReady = true
	b.ready.push(turn[K]{round: f.round, head: f.keys.Front().seq, f: f})
}

// kill accounts for the live element of a key that left the band without
// being popped (it moved to a higher band); the element itself stays in its
// flow, dead, until its turn comes or the band is reset, and so does its
// count in the age buckets: the band may look older than its live keys
// until then, which only makes it take turns sooner. The caller resets the
// band when nothing live is left.
func (b *band[K]) kill(name string) {
	b.flows[name].live--
	b.live--
}

// next pops elements of the flow first in ready until one is live
// (its key's entry in keys has its seq and band) and returns it with its
// flow. While a flow holds
// no dead element (all its elements are live) it skips the lookup. A live
// element counts in its flow's quantum; the flow then moves to its place in
// ready for its new head, or leaves ready once empty. A flow that comes
// first while full(its name) is parked instead. ok is false when no flow is
// left in ready (every one holding a live element is parked). full is nil
// when flows have no in-flight cap.
func (b *band[K]) next(keys map[K]entry, full func(string) bool) (el element[K], f *flow[K], ok bool) {
	for {
		if b.ready.len() == 0 {
			return el, nil, false
		}
		first, inRun := b.ready.first()
		f = first.f
		if full != nil && full(f.name) {
			b.ready.drop(inRun)
			f.inReady, f.parked = false, true
			b.parked = append(b.parked, f)
			continue
		}
		live := f.keys.Len() == f.live
		el = f.keys.Pop()
		b.ages.remove(el.bucket)
		if !live {
			live = b.holds(keys, el)
		}
		if live {
			f.live--
			b.live--
			b.round = f.round
			if f.served++; f.served >= b.quantum {
				f.round++
				f.served = 0
				b.top = max(b.top, f.round)
			}
		}
		if f.keys.Len() == 0 {
			b.ready.drop(inRun)
			f.inReady = false
			b.idle++
			b.sweep()
		} else {
			b.ready.replace(inRun, turn[K]{round: f.round, head: f.keys.Front().seq, f: f})
		}
		if live {
			return el, f, true
		}
	}
}

// holds reports whether el is a live element of b: its key's entry in
// keys still names it (a key that moved to another band, or was handed
// out, leaves its element dead).
func (b *band[K]) holds(keys map[K]entry, el element[K]) bool {
	e, ok := keys[el.key]
	return ok && e.seq == el.seq && int(e.prio) == b.prio
}

// unpark puts the flow name back into ready if it is parked; it reports
// whether it was.
func (b *band[K]) unpark(name string) bool {
	for i, f := range b.parked {
		if f.name == name {
			b.parked = slices.Delete(b.parked, i, i+1)
			f.parked = false
			b.enter(f)
			return true
		}
	}
	return false
}

// ready orders the turns of a band's flows. Most turns come in order (a
// flow that gets its first key is usually behind every other, in the
// current round): those go to run, a FIFO, in O(1). Turns that come out of
// order (a flow that had keys handed out and still holds some, behind flows
// that came later) go to heap, a min-heap. The next turn is the earlier of
// run's front and heap's root.
//
// Invariants (checked by core.checkInvariants): run is in order under
// before; heap is a heap under it.
type ready[K comparable] struct {
	run  fifo.Queue[turn[K]]
	heap []turn[K]
}

func (r *ready[K]) len() int { return r.run.Len() + len(r.heap) }

// push adds t.
func (r *ready[K]) push(t turn[K]) {
	if n := r.run.Len(); n == 0 || !t.before(*r.run.At(n - 1)) {
		r.run.Push(t)
		return
	}
	r.heap = append(r.heap, t)
	r.up(len(r.heap) - 1)
}

// first returns the next turn, and whether it is run's front (else heap's
// root); r must not be empty.
func (r *ready[K]) first() (turn[K], bool) {
	if len(r.heap) == 0 || r.run.Len() > 0 && r.run.Front().before(r.heap[0]) {
		return r.run.Front(), true
	}
	return r.heap[0], false
}

// drop removes the turn first returned.
func (r *ready[K]) drop(inRun bool) {
	if inRun {
		r.run.Pop()
		return
	}
	n := len(r.heap) - 1
	r.heap[0] = r.heap[n]
	r.heap[n] = turn[K]{}
	r.heap = r.heap[:n]
	if n > 0 {
		r.down(0)
	}
}

// replace puts t, a later turn of the same flow, in place of the turn first
// returned.
func (r *ready[K]) replace(inRun bool, t turn[K]) {
	switch {
	case !inRun:
		r.heap[0] = t
		r.down(0)
	case r.run.Len() == 1: // the only turn in run: still in order
		*r.run.At(0) = t
	default:
		r.run.Pop()
		r.push(t)
	}
}

// all returns every turn, in no particular order: run's, then heap's,
// with their index in that order.
func (r *ready[K]) all() iter.Seq2[int, turn[K]] {
	return func(yield func(int, turn[K]) bool) {
		run := r.run.Items()
		for i, t := range run {
			if !yield(i, t) {
				return
			}
		}
		for i, t := range r.heap {
			if !yield(len(run)+i, t) {
				return
			}
		}
	}
}

// reset empties r, keeping run's array.
func (r *ready[K]) reset() {
	r.run.Reset()
	clear(r.heap)
	r.heap = r.heap[:0]
}

// up moves the turn at index i of heap towards the root to its place.
func (r *ready[K]) up(i int) {
	h := r.heap
	t := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !t.before(h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = t
}

// down moves the turn at index i of heap away from the root to its place.
func (r *ready[K]) down(i int) {
	h := r.heap
	t := h[i]
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if d := c + 1; d < len(h) && h[d].before(h[c]) {
			c = d
		}
		if !h[c].before(t) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = t
}

// sweep drops idle flows once there are many of them, those that would
// come back as they are: a flow in a round before the current one, or in
// it with nothing handed out. A flow that had keys in the current round,
// or reached the next, is kept, or it would come back with a fresh share
// (an empty band starts a new round: then every flow goes). kept, the idle
// flows the last sweep left, must double before the next sweep, so a band
// whose idle flows all hold a share does not sweep on every hand-out.
func (b *band[K]) sweep() {
	if b.idle <= sweepIdle || b.idle < len(b.flows)/2 || b.idle < 2*b.kept {
		return
	}
	kept := 0
	for name, f := range b.flows {
		switch {
		case f.inReady, f.parked:
		case f.round < b.round || f.round == b.round && f.served == 0:
			delete(b.flows, name)
		default:
			kept++
		}
	}
	b.idle, b.kept, b.last = kept, kept, nil
}

// reset empties a band with no live element: it drops the dead elements
// still in its flows and its age buckets, and starts a round later than
// any flow's, so every flow starts afresh.
func (b *band[K]) reset() {
	for _, t := range b.ready.all() {
		b.empty(t.f)
	}
	for _, f := range b.parked {
		b.empty(f)
	}
	clear(b.parked)
	b.parked = b.parked[:0]
	b.ready.reset()
	b.top++
	b.round = b.top
	b.ages.reset()
	b.sweep()
}

// empty drops the (dead) elements of f, in ready or parked, and makes it
// idle.
func (b *band[K]) empty(f *flow[K]) {
	f.keys.Reset()
	if f.keys.Cap() > 1024 {
		f.keys = fifo.Queue[element[K]]{} // a burst's array is not kept by an idle flow
	}
	f.inReady, f.parked = false, false
	f.live = 0
	b.idle++
}

// ages counts a band's elements by when they were pushed, in buckets
// of at most the resolution it is given, so the band's oldest push time is
// known in O(1) without a heap. Buckets are created in push order and
// pushes never go back in time (an earlier time joins the last bucket), so
// the first bucket with a live element holds the oldest ones. A zero time
// means "not known" (the queue reads the clock only when something needs
// it) and also joins the last bucket; it opens one only in an empty band.
//
// Bucket ids are assigned in order; base is the id of the bucket at the
// front. They wrap around (uint32 arithmetic), which is safe as long as
// fewer than 2^32 buckets hold live elements at once.
type ages struct {
	buckets fifo.Queue[bucket]
	base    uint32
}

type bucket struct {
	at   time.Time // the first push into the bucket
	live int
}

// add counts one element pushed at at and returns its bucket's id.
func (a *ages) add(at time.Time, res time.Duration) uint32 {
	if n := a.buckets.Len(); n > 0 {
		last := a.buckets.At(n - 1)
		if at.IsZero() || at.Sub(last.at) < res {
			last.live++
			return a.base + uint32(n-1)
		}
	}
	a.buckets.Push(bucket{at: at, live: 1})
	return a.base + uint32(a.buckets.Len()-1)
}

// remove uncounts one element of bucket id and drops the empty buckets at
// the front.
func (a *ages) remove(id uint32) {
	a.buckets.At(int(id-a.base)).live--
	for a.buckets.Len() > 0 && a.buckets.At(0).live == 0 {
		a.buckets.Pop()
		a.base++
	}
}

// oldest returns when the oldest live element was pushed: zero if not
// known, ok=false if there is none.
func (a *ages) oldest() (at time.Time, ok bool) {
	if a.buckets.Len() == 0 {
		return at, false
	}
	return a.buckets.At(0).at, true
}

func (a *ages) reset() {
	a.base += uint32(a.buckets.Len())
	a.buckets.Reset()
}
