package workqueue

import (
	"fmt"
	"time"
)

// checkInvariants returns an error describing the first broken invariant
// of core (see its doc); flowOf gives each key's flow.
func (c *core[K]) checkInvariants(flowOf func(K) string) error {
	queued, processing, readded := 0, 0, 0
	for k, e := range c.keys {
		_, re := c.readded[k]
		if re != (e.seq == 0) {
			return fmt.Errorf("workqueue: key %v: seq %d, in readded %v", k, e.seq, re)
		}
		switch e.seq {
		case 0:
			readded++
			processing++
		case processingSeq:
			processing++
		default:
			queued++
		}
	}
	if len(c.readded) != readded {
		return fmt.Errorf("workqueue: %d keys in readded, want %d", len(c.readded), readded)
	}
	if c.seq == processingSeq {
		return fmt.Errorf("workqueue: the last seq is processingSeq")
	}
	if processing != c.processing {
		return fmt.Errorf("workqueue: %d keys processing, counted %d", processing, c.processing)
	}
	if err := c.checkInFlight(flowOf); err != nil {
		return err
	}
	if queued != c.queued {
		return fmt.Errorf("workqueue: %d queued keys, counted %d", queued, c.queued)
	}
	live := 0
	for p, b := range c.bands {
		if b.prio != p {
			return fmt.Errorf("workqueue: band %d filed under %d", b.prio, p)
		}
		if err := c.checkBand(b, flowOf); err != nil {
			return err
		}
		live += b.live
	}
	if live != c.queued {
		return fmt.Errorf("workqueue: bands hold %d live keys, want %d", live, c.queued)
	}
	if err := c.checkActive(); err != nil {
		return err
	}
	return c.checkStamps()
}

// checkReady checks b's ready flows (each once, marked, non-empty, filed,
// at its turn, in order) and returns them.
func (b *band[K]) checkReady() (map[*flow[K]]bool, error) {
	inReady := map[*flow[K]]bool{}
	for i, t := range b.ready.all() {
		f := t.f
		if inReady[f] || !f.inReady || f.keys.Len() == 0 || b.flows[f.name] != f {
			return nil, fmt.Errorf("workqueue: band %d: flow %q in ready twice, not marked, empty or not filed", b.prio, f.name)
		}
		if t.round != f.round || t.head != f.keys.Front().seq {
			return nil, fmt.Errorf("workqueue: band %d: flow %q in ready as round %d, head %d; it is at %d, %d",
				b.prio, f.name, t.round, t.head, f.round, f.keys.Front().seq)
		}
		if f.round < b.round || f.round > b.top || f.served >= b.quantum {
			return nil, fmt.Errorf("workqueue: band %d (rounds %d to %d, quantum %d): flow %q in round %d, %d served",
				b.prio, b.round, b.top, b.quantum, f.name, f.round, f.served)
		}
		run := b.ready.run.Items()
		if i > 0 && i < len(run) && t.before(run[i-1]) {
			return nil, fmt.Errorf("workqueue: band %d: flow %q's turn is out of order in run", b.prio, f.name)
		}
		if j := i - len(run); j > 0 && t.before(b.ready.heap[(j-1)/2]) {
			return nil, fmt.Errorf("workqueue: band %d: flow %q goes before its parent %q in heap", b.prio, f.name, b.ready.heap[(j-1)/2].f.name)
		}
		inReady[f] = true
	}
	return inReady, nil
}

// checkBand checks b's flows, ready heap, live counts and age buckets
// against keys.
func (c *core[K]) checkBand(b *band[K], flowOf func(K) string) error {
	inReady, err := b.checkReady()
	if err != nil {
		return err
	}
	parked := map[*flow[K]]bool{}
	for _, f := range b.parked {
		if parked[f] || !f.parked || f.inReady || b.flows[f.name] != f || c.full == nil || !c.full(f.name) {
			return fmt.Errorf("workqueue: band %d: flow %q parked twice, not marked, in ready, not filed or not at its cap",
				b.prio, f.name)
		}
		parked[f] = true
	}
	idle, live := 0, 0
	buckets := map[uint32]int{}
	for name, f := range b.flows {
		if f.name != name || f.inReady != inReady[f] || f.parked != parked[f] || (f.keys.Len() > 0) != (f.inReady || f.parked) {
			return fmt.Errorf("workqueue: band %d: flow %q filed as %q, in ready %v, marked %v, parked %v, marked %v, %d elements",
				b.prio, f.name, name, inReady[f], f.inReady, parked[f], f.parked, f.keys.Len())
		}
		if !inReady[f] && !parked[f] {
			idle++
		}
		n := 0
		for _, el := range f.keys.Items() {
			if el.seq == 0 || el.seq == processingSeq {
				return fmt.Errorf("workqueue: band %d, flow %q: element of %v has seq %d", b.prio, name, el.key, el.seq)
			}
			buckets[el.bucket]++
			e, ok := c.keys[el.key]
			if !ok || e.seq != el.seq {
				continue
			}
			if int(e.prio) != b.prio || flowOf(el.key) != name {
				return fmt.Errorf("workqueue: key %v of band %d, flow %q is live in band %d, flow %q",
					el.key, e.prio, flowOf(el.key), b.prio, name)
			}
			n++
		}
		if n != f.live {
			return fmt.Errorf("workqueue: band %d, flow %q: %d live elements, counted %d", b.prio, name, n, f.live)
		}
		live += n
	}
	if idle != b.idle || live != b.live {
		return fmt.Errorf("workqueue: band %d: %d idle flows and %d live keys, counted %d and %d", b.prio, idle, live, b.idle, b.live)
	}
	if b.live == 0 && (b.ready.len() > 0 || len(b.parked) > 0 || b.ages.buckets.Len() > 0) {
		return fmt.Errorf("workqueue: band %d holds no live key but %d flows in ready, %d parked, %d age buckets",
			b.prio, b.ready.len(), len(b.parked), b.ages.buckets.Len())
	}
	return b.ages.check(buckets)
}

// check compares the buckets' counts with want (bucket id -> live
// elements) and checks that their times never go back.
func (a *ages) check(want map[uint32]int) error {
	var prev time.Time
	for i, bk := range a.buckets.Items() {
		id := a.base + uint32(i)
		if bk.live != want[id] {
			return fmt.Errorf("workqueue: age bucket %d counts %d, holds %d", id, bk.live, want[id])
		}
		delete(want, id)
		if bk.at.Before(prev) || (i > 0 && bk.at.IsZero()) {
			return fmt.Errorf("workqueue: age bucket %d at %v after %v", id, bk.at, prev)
		}
		prev = bk.at
	}
	if a.buckets.Len() > 0 && a.buckets.At(0).live == 0 {
		return fmt.Errorf("workqueue: the front age bucket is empty")
	}
	if len(want) > 0 {
		return fmt.Errorf("workqueue: live elements in %d age buckets that do not exist", len(want))
	}
	return nil
}

// checkInFlight checks that, with a cap, inFlight counts the keys
// processing or re-added by flow, none above the cap; without one, that
// nothing is counted.
func (c *core[K]) checkInFlight(flowOf func(K) string) error {
	if c.full == nil {
		if len(c.inFlight) > 0 {
			return fmt.Errorf("workqueue: %d flows counted in flight with no cap", len(c.inFlight))
		}
		return nil
	}
	want := map[string]int{}
	for k, e := range c.keys {
		if e.seq == 0 || e.seq == processingSeq {
			want[flowOf(k)]++
		}
	}
	for flow, n := range c.inFlight {
		if n != want[flow] || n > c.maxInFlight {
			return fmt.Errorf("workqueue: flow %q: %d keys in flight, counted %d (cap %d)", flow, want[flow], n, c.maxInFlight)
		}
		delete(want, flow)
	}
	if len(want) > 0 {
		return fmt.Errorf("workqueue: flows with keys in flight not counted: %v", want)
	}
	return nil
}

// checkActive checks that active holds the bands with live keys, in order.
func (c *core[K]) checkActive() error {
	n := 0
	for _, b := range c.bands {
		if b.live > 0 {
			n++
		}
	}
	for i, b := range c.active {
		if b.live == 0 || c.bands[b.prio] != b || (i > 0 && c.active[i-1].prio <= b.prio) {
			return fmt.Errorf("workqueue: active band %d: %d live, filed %v, out of order", b.prio, b.live, c.bands[b.prio] == b)
		}
	}
	if n != len(c.active) || c.multi.Load() != (len(c.active) > 1) {
		return fmt.Errorf("workqueue: %d active bands, %d with live keys, multi %v", len(c.active), n, c.multi.Load())
	}
	if c.hot != nil && c.bands[c.hot.prio] != c.hot {
		return fmt.Errorf("workqueue: the hot band %d is not filed", c.hot.prio)
	}
	return nil
}

// checkStamps checks that the queued and re-added keys' entries are
// stamped (and no other's), and that the stamps' slots in use are exactly
// those the processing and re-added keys' entries name, each holding its
// key.
func (c *core[K]) checkStamps() error {
	if c.stamps == nil {
		return nil
	}
	processing := 0
	for k, e := range c.keys {
		if d := e.dirtied != 0; d != (e.seq != processingSeq) {
			return fmt.Errorf("workqueue: key %v (seq %d): dirtied stamp %v", k, e.seq, d)
		}
		if e.seq != 0 && e.seq != processingSeq {
			continue
		}
		processing++
		if int(e.slot) >= len(c.stamps.procs) || !c.stamps.procs[e.slot].used || c.stamps.procs[e.slot].key != k {
			return fmt.Errorf("workqueue: key %v (seq %d): its slot %d does not hold it", k, e.seq, e.slot)
		}
	}
	used := 0
	for _, p := range c.stamps.procs {
		if p.used {
			used++
		}
	}
	if used != processing || used != c.stamps.used || used+len(c.stamps.free) != len(c.stamps.procs) {
		return fmt.Errorf("workqueue: %d started slots in use and %d free of %d, for %d keys processing",
			used, len(c.stamps.free), len(c.stamps.procs), processing)
	}
	return nil
}
