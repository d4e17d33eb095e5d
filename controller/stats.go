package controller

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ctrlkit/ctrlkit/internal/peak"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Reason says why a key was queued: an event of a source, or the
// controller's own requeue.
type Reason struct {
	// Event is what happened: "add", "update", "delete", "initial list",
	// "resync" for an event of Source; "retry after error", "requeue after"
	// or "held for read-your-writes" for the controller's own requeues; a
	// manager adds "its writes are visible (read-your-writes)".
	Event string
	// Source names where the event came from (an informer), if anywhere.
	Source string
	// At is when the key was added for this reason; Due, for a delayed
	// add, when it is handed to the queue.
	At, Due time.Time
}

// String reads as a sentence fragment: "update of deployments.apps/v1".
func (r Reason) String() string {
	s := r.Event
	if r.Source != "" {
		s += " of " + r.Source
	}
	if !r.Due.IsZero() {
		s += fmt.Sprintf(" (due %s after)", r.Due.Sub(r.At).Round(time.Millisecond))
	}
	return s
}

// KeyError is a failed reconcile.
type KeyError[K comparable] struct {
	Key K
	Err string
	At  time.Time
	// Attempt is the number of failures of the key in a row, this one
	// included.
	Attempt int
}

// Stats is a snapshot of a controller's state.
type Stats[K comparable] struct {
	Name    string
	Workers int
	// Running reports that Run was called; Synced that its caches synced
	// and its workers started.
	Running, Synced bool
	// Queue is the work queue's state.
	Queue workqueue.Stats[K]
	// Reconciles counts finished reconciles; Errors those that returned
	// an error (terminal ones included) or panicked; Panics those that
	// panicked; Retries the keys queued again after an error.
	Reconciles, Errors, Panics, Retries uint64
	// LastErrors are the most recent failed reconciles, newest first, at
	// most RecentErrors of them.
	LastErrors []KeyError[K]
}

// KeyStats is what the controller knows of one key.
type KeyStats[K comparable] struct {
	// Queue is where the key is in the work queue.
	Queue workqueue.KeyState
	// First and Last are the first and the latest reason the key was added
	// for since its last reconcile started (equal when there was one), and
	// Adds how many adds there were; zero when the key was added without
	// a reason (Add) or not at all.
	First, Last Reason
	Adds        int
	// Attempts is the number of failures of the key in a row (the rate
	// limiter's count).
	Attempts int
	// LastError is the key's last error while it is failing: nil after a
	// success.
	LastError *KeyError[K]
	// TraceID is the trace id of the key's latest reconcile, with a
	// tracer (Options.Tracer); "" without, or when it is no longer known.
	TraceID string
}

// RecentErrors is how many failed reconciles Stats remembers.
const RecentErrors = 16

// tracker keeps what Stats and KeyStats report beyond the queue's own
// state: counters, the reasons of queued keys, the errors of failing keys.
// Its zero value is ready but for its times: New sets its epoch.
type tracker[K comparable] struct {
	reconciles, errors, panics, retries atomic.Uint64

	// epoch is New's time. The tracker keeps times as offsets from it, and
	// reads the time as one (see now).
	epoch time.Time

	// mu guards the fields below. Invariant: recent[(next-1) mod len] is
	// the newest of the n entries of recent.
	mu      sync.Mutex
	why     map[K]why         // keys added with a reason since their last reconcile started
	running []running[K]      // per worker: the key it reconciles, with its reasons (none when added without)
	failing map[K]KeyError[K] // keys whose last reconcile failed
	// The peaks of why and failing: a map that held a large backlog (the
	// initial list's keys, a failure storm) is rebuilt small once drained,
	// else every later access probes a table sized for the backlog, cold in
	// the processor's cache.
	whyPeak, failingPeak peak.Tracker
	recent               [RecentErrors]KeyError[K]
	next, n              int
	// labels are the texts of the reasons' events and sources, each kept
	// once: a reason holds their indexes (see reason). label is the index
	// of each; last the latest text looked up and its index.
	labels []string
	label  map[string]uint32
	last   [2]struct { // the two latest texts looked up: an event's and a source's
		text  string
		index uint32
	}
	// With a tracer (tracing true): the links of each key's next
	// reconcile, and the trace id of each key's latest.
	tracing bool
	// linkOnly is Options.LinkTraceparents: a cause's traceparent is
	// linked, never made the parent.
	linkOnly bool
	// drawBelow is Options.TraceSampling as a bound on a uniform uint64
	// (an event is drawn when one falls below it); 0: every event.
	drawBelow uint64
	links     map[K]*links
	free      []*links // emptied links, for reuse
	traceIDs  map[K]trace.TraceID
}

// running is a worker's slot of the tracker: the key it reconciles, if
// busy. A slot per worker, not a map of keys: starting and finishing a
// reconcile hash no key for it.
type running[K comparable] struct {
	key  K
	why  why
	busy bool
}

// why are the reasons a key was added for: 56 bytes and no pointer, so a
// map of every queued key's is small and the collector need not look
// inside its values.
type why struct {
	first, last reason
	adds        int
}

// reason is a Reason with its texts as indexes into the tracker's labels
// and its times as offsets from the tracker's epoch. A time read back is
// Equal to the one noted (not ==: it comes back in the epoch's location,
// with a monotonic reading).
type reason struct {
	event, source uint32
	at, due       time.Duration // noTime for a zero time
}

// maxLabels bounds the distinct texts a tracker keeps for reasons (events
// and sources): a reason whose text comes after that many reads as
// otherLabel.
const maxLabels = 4096

// otherLabel is the text of a reason that came after maxLabels others.
const otherLabel = "(other: too many distinct reasons to remember)"

// labelOf returns the index of text in t.labels, adding it if there is
// room. Called with t.mu held.
func (t *tracker[K]) labelOf(text string) uint32 {
	for _, l := range t.last {
		if text == l.text && t.labels != nil {
			return l.index
		}
	}
	if t.label == nil {
		t.labels, t.label = []string{"", otherLabel}, map[string]uint32{"": 0, otherLabel: 1}
	}
	i, ok := t.label[text]
	if !ok {
		i = 1
		if len(t.labels) < maxLabels {
			i = uint32(len(t.labels))
			t.labels = append(t.labels, text)
			t.label[text] = i
		}
	}
	t.last[1] = t.last[0]
	t.last[0].text, t.last[0].index = text, i
	return i
}

// noTime is the offset of a zero time.
const noTime = time.Duration(math.MinInt64)

// now is the current time: the epoch plus the time since, which reads only
// the monotonic clock where time.Now reads the wall clock too (every add
// with a reason and every reconcile read it). Its wall-clock part does not
// follow a step of the system's clock after New; the reasons and errors it
// dates are shown, not compared with other clocks.
func (t *tracker[K]) now() time.Time { return t.epoch.Add(time.Since(t.epoch)) }

// pack and unpack are called with t.mu held.
func (t *tracker[K]) pack(r Reason) reason {
	return reason{event: t.labelOf(r.Event), source: t.labelOf(r.Source), at: t.offset(r.At), due: t.offset(r.Due)}
}

func (t *tracker[K]) unpack(r reason) Reason {
	var event, source string
	if t.labels != nil {
		event, source = t.labels[r.event], t.labels[r.source]
	}
	return Reason{Event: event, Source: source, At: t.time(r.at), Due: t.time(r.due)}
}

func (t *tracker[K]) offset(at time.Time) time.Duration {
	if at.IsZero() {
		return noTime
	}
	return max(at.Sub(t.epoch), noTime+1) // Sub saturates: a time 292 years before the epoch must not read back as zero
}

func (t *tracker[K]) time(d time.Duration) time.Time {
	if d == noTime {
		return time.Time{}
	}
	return t.epoch.Add(d)
}

func (t *tracker[K]) note(key K, r Reason) { t.noteAfter(key, r, trace.SpanContext{}) }

// noteAfter is note for a reconcile asked for by the one whose span is
// prev (a retry's, a requeue's): its link points to that span, and is
// made whenever prev was sampled (the story of a traced reconcile goes on
// in its retry), else drawn like an event's.
func (t *tracker[K]) noteAfter(key K, r Reason, prev trace.SpanContext) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noteLocked(key, r)
	if t.tracing && (prev.IsSampled() || t.draw()) {
		if p := t.linkLocked(key, r, nil); p != nil {
			p.prev = prev
		}
	}
}

// noteBatch records reasons[i] for keys[i], and for a traced controller
// the links of their next reconciles, under one lock: with causes, a link
// of each causes[i] that is not zero (drawn by the source); without, with
// draw set, a link of each reason drawn (AddBatchBecause). A reason
// without a time is dated now.
func (t *tracker[K]) noteBatch(keys []K, reasons []Reason, causes []Cause, draw bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, key := range keys {
		r := reasons[i]
		if r.At.IsZero() {
			r.At = now
		}
		t.noteLocked(key, r)
		switch {
		case len(causes) > 0:
			if causes[i].Object != (object.ObjectName{}) {
				t.linkLocked(key, r, &causes[i])
			}
		case draw && t.tracing && t.draw():
			t.linkLocked(key, r, nil)
		}
	}
}

// noteLocked records that key was added for r. Called with t.mu held.
func (t *tracker[K]) noteLocked(key K, r Reason) {
	p := t.pack(r)
	if t.why == nil {
		t.why = map[K]why{}
	}
	w, ok := t.why[key]
	if !ok {
		w.first = p
	}
	w.last = p
	w.adds++
	t.why[key] = w
	if !ok {
		t.whyPeak.Grew(len(t.why))
	}
}

// started moves key, with its reasons if it has any, to worker's slot.
func (t *tracker[K]) started(key K, worker int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.why[key]
	if ok {
		delete(t.why, key)
		t.why = peak.Shrink(&t.whyPeak, t.why)
	}
	if worker >= len(t.running) {
		t.running = append(t.running, make([]running[K], worker+1-len(t.running))...)
	}
	t.running[worker] = running[K]{key: key, why: w, busy: true}
}

// inFlight returns the keys being reconciled.
func (t *tracker[K]) inFlight() []K {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []K
	for _, r := range t.running {
		if r.busy {
			keys = append(keys, r.key)
		}
	}
	return keys
}

// runningWhy returns the reasons of key if a worker reconciles it. Called
// with t.mu held.
func (t *tracker[K]) runningWhy(key K) why {
	for _, r := range t.running {
		if r.busy && r.key == key {
			return r.why
		}
	}
	return why{}
}

// finished records the outcome of worker's reconcile of key; err is nil
// after a success. attempt is the key's failures in a row, this one
// included.
func (t *tracker[K]) finished(key K, worker int, err error, attempt int, now time.Time) {
	t.reconciles.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if worker < len(t.running) {
		t.running[worker] = running[K]{}
	}
	if err == nil {
		if _, ok := t.failing[key]; ok {
			delete(t.failing, key)
			t.failing = peak.Shrink(&t.failingPeak, t.failing)
		}
		return
	}
	t.errors.Add(1)
	e := KeyError[K]{Key: key, Err: err.Error(), At: now, Attempt: attempt}
	if t.failing == nil {
		t.failing = map[K]KeyError[K]{}
	}
	t.failing[key] = e
	t.failingPeak.Grew(len(t.failing))
	t.recent[t.next] = e
	t.next = (t.next + 1) % len(t.recent)
	t.n = min(t.n+1, len(t.recent))
}

// lastErrors returns the recent errors, newest first.
func (t *tracker[K]) lastErrors() []KeyError[K] {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]KeyError[K], 0, t.n)
	for k := 1; k <= t.n; k++ {
		out = append(out, t.recent[(t.next-k+len(t.recent))%len(t.recent)])
	}
	return out
}

// AddBecause queues key as Add does and remembers why, for KeyStats (a
// manager's sources say which event of which informer). It costs one more
// short lock than Add; safe for concurrent use.
func (c *Controller[K]) AddBecause(key K, r Reason) {
	if r.At.IsZero() {
		r.At = c.track.now()
	}
	c.track.note(key, r)
	c.queue.Add(key)
}

// AddBatchBecause queues keys, in order, at priority, as AddBatch does,
// and remembers why each was added: reasons[i] for keys[i] (a reason
// without a time is dated once for the batch). It takes each of the
// tracker's and the queue's locks once for the batch, and allocates
// nothing but for keys new to the tracker's map. It panics if the two
// slices differ in length. keys and reasons are the caller's: they are
// read during the call only. Safe for concurrent use; never blocks (a
// manager's sources call it on their informers' goroutines).
func (c *Controller[K]) AddBatchBecause(keys []K, reasons []Reason, priority int) {
	if len(keys) != len(reasons) {
		panic(fmt.Sprintf("controller: AddBatchBecause with %d keys and %d reasons", len(keys), len(reasons)))
	}
	if len(keys) == 0 {
		return
	}
	c.addNoted(keys, reasons, nil, true, priority)
}

// noteChunk is how many keys addNoted notes before adding them to the
// queue: as many as the queue adds per lock.
const noteChunk = 32

// addNoted notes why each of keys is added (and links its cause) and adds
// it to the queue, a chunk at a time: a worker can take a key between
// two of the queue's locks, and the events of a later chunk must then be
// the reasons of the reconcile they cause, not of the one already
// running (which would leave that later reconcile with no reason).
func (c *Controller[K]) addNoted(keys []K, reasons []Reason, causes []Cause, draw bool, priority int) {
	now := c.track.now()
	for len(keys) > 0 {
		n := min(len(keys), noteChunk)
		var cs []Cause
		if len(causes) > 0 {
			cs, causes = causes[:n], causes[n:]
		}
		c.track.noteBatch(keys[:n], reasons[:n], cs, draw, now)
		c.queue.AddBatch(keys[:n], priority)
		keys, reasons = keys[n:], reasons[n:]
	}
}

// requeue adds key after d (now when d <= 0), remembering why and that it
// was at now, and (prev) the span of the reconcile that asked for it.
func (c *Controller[K]) requeue(key K, event string, now time.Time, d time.Duration, priority int, prev trace.SpanContext) {
	c.track.noteAfter(key, Reason{Event: event, At: now, Due: now.Add(d)}, prev)
	c.queue.AddWithOpts(key, workqueue.AddOpts{After: d, Priority: priority})
}

// Stats returns a snapshot of the controller's state. With metrics (a
// Registerer, as the manager's controllers have) its cost grows with the
// number of workers, not with the queue's depth; without, the queue's
// Stats also looks at every key waiting. Safe for concurrent use.
func (c *Controller[K]) Stats() Stats[K] {
	c.mu.Lock()
	st := Stats[K]{Name: c.opts.Name, Workers: c.opts.Workers, Running: c.once.Started(), Synced: c.synced}
	c.mu.Unlock()
	st.Queue = c.queue.Stats()
	st.Reconciles, st.Errors = c.track.reconciles.Load(), c.track.errors.Load()
	st.Panics, st.Retries = c.track.panics.Load(), c.track.retries.Load()
	st.LastErrors = c.track.lastErrors()
	return st
}

// KeyStats returns what the controller knows of key: where it is in the
// queue (workqueue.Queue.State: its cost grows with the queue's flows,
// not its depth), why it was added, its failures. Safe for concurrent
// use.
func (c *Controller[K]) KeyStats(key K) KeyStats[K] {
	ks := KeyStats[K]{Queue: c.queue.State(key), Attempts: c.queue.NumRequeues(key)}
	c.track.mu.Lock()
	defer c.track.mu.Unlock()
	w, ok := c.track.why[key]
	if !ok {
		w = c.track.runningWhy(key)
	}
	if w.adds > 0 {
		ks.First, ks.Last, ks.Adds = c.track.unpack(w.first), c.track.unpack(w.last), w.adds
	}
	if e, ok := c.track.failing[key]; ok {
		ks.LastError = &e
	}
	if id, ok := c.track.traceIDs[key]; ok {
		ks.TraceID = id.String()
	}
	return ks
}
