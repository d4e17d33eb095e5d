package workqueue

import (
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
// default) at one priority, oldest first.
type flow[K comparable] struct {
	name    string
	keys    fifo.Queue[element[K]]
	live    int  // live elements in keys
	inTurns bool // in band.turns; exactly when keys is not empty
}

// band holds the queued keys of one priority: one FIFO per flow, and the
// flows that hold keys in round-robin order, so a flow with one key waits
// for at most one key of every other flow, however many those hold.
//
// Invariants (checked by core.checkInvariants): turns holds exactly the
// flows whose keys are not empty, once each; idle counts the flows of flows
// that are not in turns; live is the sum of the flows' live counts and of
// the ages buckets' counts; a band with no live element holds no element
// at all (reset empties it).
type band[K comparable] struct {
	prio  int
	live  int
	flows map[string]*flow[K]  // every flow of the band; idle ones until swept
	turns fifo.Queue[*flow[K]] // flows holding elements; the front one's turn is next
	idle  int                  // flows not in turns
	last  *flow[K]             // the flow pushed to last: skips the map for runs of one flow
	ages  ages                 // when the live elements were pushed, coarsely
}

// sweepIdle is how many idle flows a band keeps before it drops them, as
// long as they are also at least half of its flows: namespaces come and go,
// and a long-lived queue must not remember each one forever.
const sweepIdle = 1024

func newBand[K comparable](prio int) *band[K] {
	return &band[K]{prio: prio, flows: map[string]*flow[K]{}}
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
	if !f.inTurns {
		f.inTurns = true
		b.turns.Push(f)
		b.idle--
	}
	f.keys.Push(element[K]{key: k, seq: seq, bucket: b.ages.add(at, res)})
	f.live++
	b.live++
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

// next pops elements of the flow whose turn it is until one is live (its
// key's entry in dirty has its seq) and returns it. While a flow holds no
// dead element (all its elements are live) it skips the lookup. The flow
// goes to the back of the turns after a live element, and leaves them once
// empty. It must only be called when live > 0.
func (b *band[K]) next(dirty map[K]entry) element[K] {
	for {
		f := b.turns.Front()
		live := f.keys.Len() == f.live
		el := f.keys.Pop()
		b.ages.remove(el.bucket)
		if !live {
			e, ok := dirty[el.key]
			live = ok && e.seq == el.seq && int(e.prio) == b.prio
		}
		if live {
			f.live--
			b.live--
		}
		switch {
		case f.keys.Len() == 0:
			b.turns.Pop()
			f.inTurns = false
			b.idle++
			b.sweep()
		case live && b.turns.Len() > 1:
			b.turns.Pop()
			b.turns.Push(f)
		}
		if live {
			return el
		}
	}
}

// sweep drops idle flows once there are many of them.
func (b *band[K]) sweep() {
	if b.idle <= sweepIdle || b.idle < len(b.flows)/2 {
		return
	}
	for name, f := range b.flows {
		if !f.inTurns {
			delete(b.flows, name)
		}
	}
	b.idle, b.last = 0, nil
}

// reset empties a band with no live element: it drops the dead elements
// still in its flows and its age buckets.
func (b *band[K]) reset() {
	for b.turns.Len() > 0 {
		f := b.turns.Pop()
		f.keys.Reset()
		if f.keys.Cap() > 1024 {
			f.keys = fifo.Queue[element[K]]{} // a burst's array is not kept by an idle flow
		}
		f.inTurns = false
		f.live = 0
		b.idle++
	}
	b.ages.reset()
	b.sweep()
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
