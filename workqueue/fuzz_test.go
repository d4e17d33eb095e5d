package workqueue

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// model is the naive reference for FuzzQueue, written for obviousness
// rather than speed: each band is a slice in push order scanned linearly,
// with each flow's round and the keys it was handed out in it.
//
// It follows the documented rules: the highest band first; a lower band
// takes turns with it once its oldest key has waited (top - prio) aging
// steps, measured against the latest time the queue was given; within a
// band, the keys of the earliest round go out in push order, each flow
// getting quantum keys a round; a flow that gets a key after having none
// joins the round of the last key handed out, or stays in a later one; an
// empty band forgets its flows. A key that moves to a higher band leaves a
// ghost behind that keeps its flow's place in push order, and its push
// time in the band's age, until it comes up (or its band empties). With an
// in-flight cap, a flow whose turn comes while it has that many keys
// processing is parked: passed over until one of them is done, when it
// joins the band's current round (or stays in a later one it reached). A
// band with every flow parked leaves the turn to the next band down.
type model struct {
	flowOf      func(byte) string
	step        time.Duration
	quantum     int
	maxInFlight int                // 0: no cap
	inFlight    map[string]int     // keys processing by flow
	bands       map[int]*modelBand // bands with live keys
	band        map[byte]int       // the band of each queued key
	processing  map[byte]bool      // handed out, not done
	readded     map[byte]int       // added while processing, with the priority to queue it at
	latest      time.Time          // the latest time passed to the queue
	multiSince  time.Time          // when two bands last became active
	lastPrio    int                // the band served last
	shutdown    bool
	seq         int
}

type modelBand struct {
	elems  []modelElem           // push order
	flows  map[string]*modelFlow // every flow pushed to since the band was created
	round  int                   // the round of the last key handed out
	live   map[byte]struct{}     // the keys queued in the band
	lastAt time.Time             // the time of the last push
	parked map[string]bool       // flows passed over at their in-flight cap
}

type modelFlow struct {
	round, served int
}

type modelElem struct {
	key   byte
	flow  string
	ghost bool
	at    time.Time // when it was pushed; zero: not known
}

func newModel(flowOf func(byte) string, step time.Duration, quantum, maxInFlight int) *model {
	return &model{flowOf: flowOf, step: step, quantum: quantum, maxInFlight: maxInFlight, inFlight: map[string]int{},
		bands: map[int]*modelBand{}, band: map[byte]int{}, processing: map[byte]bool{}, readded: map[byte]int{}}
}

// full reports whether flow is at its in-flight cap.
func (m *model) full(flow string) bool { return m.maxInFlight > 0 && m.inFlight[flow] >= m.maxInFlight }

// gettable reports whether a queued key's flow is below its cap: whether
// Get returns without waiting.
func (m *model) gettable() bool {
	for k := range m.band {
		if !m.full(m.flowOf(k)) {
			return true
		}
	}
	return false
}

// stamp returns the time the queue passes with an add (and, at priority 0,
// with Get and Done): the clock's, when metrics are on, the priority is not
// 0 or two bands are active.
func (m *model) stamp(now time.Time, metrics bool, prio int) time.Time {
	if metrics || prio != 0 || len(m.bands) > 1 {
		return now
	}
	return time.Time{}
}

func (m *model) see(now time.Time) {
	if now.After(m.latest) {
		m.latest = now
	}
}

func (m *model) add(k byte, prio int, now time.Time) {
	if m.shutdown {
		return
	}
	m.see(now)
	if p, ok := m.band[k]; ok {
		if prio > p {
			m.ghost(k, p)
			m.push(k, prio, now)
		}
		return
	}
	if m.processing[k] {
		if p, ok := m.readded[k]; !ok || prio > p {
			m.readded[k] = prio
		}
		return
	}
	m.push(k, prio, now)
}

func (m *model) ghost(k byte, prio int) {
	b := m.bands[prio]
	for i, e := range b.elems {
		if e.key == k && !e.ghost {
			b.elems[i].ghost = true
		}
	}
	delete(b.live, k)
	delete(m.band, k)
	if len(b.live) == 0 {
		delete(m.bands, prio)
	}
}

func (m *model) push(k byte, prio int, at time.Time) {
	b := m.bands[prio]
	switch {
	case b == nil:
		if at.IsZero() && len(m.bands) > 0 {
			at = m.latest
		}
		b = &modelBand{live: map[byte]struct{}{}, flows: map[string]*modelFlow{}, parked: map[string]bool{}}
		m.bands[prio] = b
		if len(m.bands) == 2 {
			m.multiSince = at
		}
	case at.IsZero():
		at = b.lastAt
	}
	b.lastAt = at
	flow := m.flowOf(k)
	f := b.flows[flow]
	if f == nil {
		f = &modelFlow{round: b.round}
		b.flows[flow] = f
	}
	if !slices.ContainsFunc(b.elems, func(e modelElem) bool { return e.flow == flow }) && f.round < b.round {
		f.round, f.served = b.round, 0
	}
	b.elems = append(b.elems, modelElem{key: k, flow: flow, at: at})
	b.live[k] = struct{}{}
	m.band[k] = prio
}

func (m *model) done(k byte, now time.Time) {
	if !m.processing[k] {
		return
	}
	delete(m.processing, k)
	m.see(now)
	if flow := m.flowOf(k); m.maxInFlight > 0 {
		if m.inFlight[flow]--; m.inFlight[flow] == m.maxInFlight-1 {
			for _, b := range m.bands {
				if b.parked[flow] {
					delete(b.parked, flow)
					if f := b.flows[flow]; f.round < b.round {
						f.round, f.served = b.round, 0
					}
				}
			}
		}
	}
	if p, ok := m.readded[k]; ok {
		delete(m.readded, k)
		m.push(k, p, now)
	}
}

// get returns the key the queue must hand out at now; ok is false if none.
func (m *model) get(now time.Time) (k byte, ok bool) {
	if len(m.band) == 0 {
		return 0, false
	}
	m.see(now)
	picked := m.pick()
	if k, ok := m.getFrom(picked); ok {
		return k, true
	}
	for _, p := range m.prios() {
		if _, ok := m.bands[p]; ok && p != picked {
			if k, ok := m.getFrom(p); ok {
				return k, true
			}
		}
	}
	return 0, false
}

// getFrom hands out band prio's next key, parking the flows at their cap
// whose turn comes; ok is false when every flow left is parked.
func (m *model) getFrom(prio int) (k byte, ok bool) {
	b := m.bands[prio]
	for {
		// The first element of each flow not parked is a candidate; the
		// earliest round wins, then the earliest push.
		i := -1
		for j, e := range b.elems {
			first := !slices.ContainsFunc(b.elems[:j], func(o modelElem) bool { return o.flow == e.flow })
			if first && !b.parked[e.flow] && (i < 0 || b.flows[e.flow].round < b.flows[b.elems[i].flow].round) {
				i = j
			}
		}
		if i < 0 {
			return 0, false
		}
		e := b.elems[i]
		if m.full(e.flow) {
			b.parked[e.flow] = true
			continue
		}
		b.elems = slices.Delete(b.elems, i, i+1)
		if e.ghost {
			continue
		}
		f := b.flows[e.flow]
		b.round = f.round
		if f.served++; f.served == m.quantum {
			f.round, f.served = f.round+1, 0
		}
		delete(b.live, e.key)
		delete(m.band, e.key)
		if len(b.live) == 0 {
			delete(m.bands, prio)
		}
		m.processing[e.key] = true
		if m.maxInFlight > 0 {
			m.inFlight[e.flow]++
		}
		m.lastPrio = prio
		return e.key, true
	}
}

// prios returns the priorities of the bands with live keys, highest first.
func (m *model) prios() []int {
	var prios []int
	for p := range m.bands {
		prios = append(prios, p)
	}
	slices.Sort(prios)
	slices.Reverse(prios)
	return prios
}

func (m *model) pick() int {
	prios := m.prios()
	top := prios[0]
	if top < m.lastPrio {
		return top
	}
	for _, p := range prios[1:] {
		if p < m.lastPrio && m.latest.Sub(m.oldest(p)) >= time.Duration(top-p)*m.step {
			return p
		}
	}
	return top
}

// oldest is when band p's oldest element (ghosts included) was pushed, or
// multiSince if that is not known.
func (m *model) oldest(p int) time.Time {
	var oldest time.Time
	for _, e := range m.bands[p].elems {
		if e.at.IsZero() {
			return m.multiSince
		}
		if oldest.IsZero() || e.at.Before(oldest) {
			oldest = e.at
		}
	}
	return oldest
}

// fuzzPriorities are the priorities FuzzQueue adds at.
var fuzzPriorities = []int{0, -1, 1, -3}

// FuzzQueue decodes each pair of bytes into an operation on a Queue and on
// the model, and fails when they disagree or an invariant breaks. Keys are
// 0-7 in three flows; priorities are 0, -1, 1 and -3; the clock is fake and
// the aging step is a second; the quantum is 1 to 4 keys (by the number of
// operations), the in-flight cap per flow none, 1 or 2 (likewise). Get is
// only called when it cannot block. Odd lengths run with metrics on, so
// the queue reads the clock on every add.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2, 1})
	f.Add([]byte{0, 1, 1, 0, 0, 1, 2, 1, 1, 0, 2, 1})
	f.Add([]byte{0, 3, 0, 4, 3, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{5, 25, 0, 1, 0, 2, 5, 26, 6, 7, 6, 7, 1, 0, 1, 0, 1, 0})
	f.Fuzz(fuzzQueue)
}

func fuzzQueue(t *testing.T, ops []byte) {
	clk := newFakeClock()
	flowOf := func(k byte) string { return string(rune('a' + k%3)) }
	quantum := len(ops)/2%4 + 1
	maxInFlight := len(ops) / 8 % 3
	opts := Options[byte]{Clock: clk, Fairness: Fairness[byte]{FlowKey: flowOf, AgingStep: time.Second, Quantum: quantum,
		MaxInFlight: maxInFlight}}
	metrics := len(ops)%2 == 1
	if metrics {
		opts.Name, opts.Registerer = "fuzz", prometheus.NewRegistry()
	}
	q, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	m := newModel(flowOf, time.Second, quantum, maxInFlight)
	for i := 0; i+1 < len(ops); i += 2 {
		applyOp(t, q, m, clk, metrics, ops[i]%7, ops[i+1])
		if err := q.core.checkInvariants(q.flowKey); err != nil {
			t.Fatalf("op %d: %v", i/2, err)
		}
		if got, want := q.Len(), len(m.band); got != want {
			t.Fatalf("op %d: Len() = %d, model has %d", i/2, got, want)
		}
		if got := q.ShuttingDown(); got != m.shutdown {
			t.Fatalf("op %d: ShuttingDown() = %v, model %v", i/2, got, m.shutdown)
		}
		checkViews(t, i/2, q, m)
	}
}

// checkViews compares what the queue shows of its keys (State, Stats, the
// depth gauge's source) with the model.
func checkViews(t *testing.T, op int, q *Queue[byte], m *model) {
	t.Helper()
	st := q.Stats()
	if st.Depth != len(m.band) || st.Redirtied != len(m.readded) || len(st.Processing) != len(m.processing) {
		t.Fatalf("op %d: Stats depth %d, re-added %d, processing %d; model %d, %d, %d",
			op, st.Depth, st.Redirtied, len(st.Processing), len(m.band), len(m.readded), len(m.processing))
	}
	if got, want := (*queueProgress[byte])(q).depth(), len(m.band)+len(m.readded); got != want {
		t.Fatalf("op %d: depth gauge %d, model %d", op, got, want)
	}
	for k := range byte(8) {
		_, queued := m.band[k]
		_, readded := m.readded[k]
		got := q.State(k)
		if got.Queued != queued || got.Processing != m.processing[k] || got.Redirtied != readded {
			t.Fatalf("op %d: State(%d) = %+v; model queued %v, processing %v, re-added %v",
				op, k, got, queued, m.processing[k], readded)
		}
	}
}

// applyOp applies op with argument arg to both: 0 add, 1 get, 2 done,
// 3 shut down, 4 done of the smallest key being processed, 5 add at a
// priority, 6 move the clock. The key is arg%8; op 5's priority is
// fuzzPriorities[arg/8%4], and when arg/32 is odd op 5 adds the key and
// key+3 (mod 8) as one AddBatch; op 6 moves the clock by (arg%8+1)/4 s.
func applyOp(t *testing.T, q *Queue[byte], m *model, clk *fakeClock, metrics bool, op, arg byte) {
	t.Helper()
	k := arg % 8
	stamp := func(prio int) time.Time { return m.stamp(clk.Now(), metrics, prio) }
	switch op {
	case 0:
		m.add(k, 0, stamp(0))
		q.Add(k)
	case 1:
		stepGet(t, q, m, stamp(0))
	case 2:
		m.done(k, stamp(0))
		q.Done(k)
	case 3:
		q.ShutDown()
		m.shutdown = true
	case 4:
		for pk := range byte(8) {
			if m.processing[pk] {
				m.done(pk, stamp(0))
				q.Done(pk)
				break
			}
		}
	case 5:
		prio := fuzzPriorities[arg/8%4]
		if arg/32%2 == 0 {
			m.add(k, prio, stamp(prio))
			q.AddWithOpts(k, AddOpts{Priority: prio})
			break
		}
		keys := []byte{k, (k + 3) % 8}
		for _, bk := range keys {
			m.add(bk, prio, stamp(prio))
		}
		q.AddBatch(keys, prio)
	case 6:
		clk.step(time.Duration(k+1) * time.Second / 4)
		if arg >= 128 { // and a hint of keys to come, which changes no state
			q.Reserve(int(arg))
		}
	}
}

func stepGet(t *testing.T, q *Queue[byte], m *model, now time.Time) {
	t.Helper()
	if !m.gettable() && !m.shutdown {
		return // Get would block
	}
	got, shutdown := q.Get()
	want, ok := m.get(now)
	if !ok {
		if !shutdown {
			t.Fatalf("Get() = %d, false; model is shut down and empty", got)
		}
		return
	}
	if got != want || shutdown {
		t.Fatalf("Get() = %d, %v; model hands out %d", got, shutdown, want)
	}
}
