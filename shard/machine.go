package shard

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// The handoff protocol of docs/design/003-sharding.md as a pure state
// machine: the machine decides, sharder.go does the IO. Inputs are what
// happened, actions what to do. The machine holds no context, clock,
// goroutine, lock or client: time arrives in inputs, the ring's table and
// which of its holders expired arrive in tableRead.
//
// A step runs through phases, each waiting for the answer to one request
// (an action marked "request" below; next returns at most one):
//
//	idle      --membersSeen-->  draining (some shard releasing) or reading
//	draining  --drained------>  reading (the drained shards are released in
//	                            this step, the others stay closed for the next)
//	reading   --tableRead---->  writing (the table must change), or as tableWritten
//	writing   --tableWritten->  relisting (the selector changed or the caches are
//	                            not listed with it), or idle
//	writing   --tableConflict-> reading (at most maxTableReads reads a step)
//	relisting --relisted----->  idle, the acquired shards open
//	any       --failed------->  idle, the error kept for Ready
//	any       --lapsed------->  idle, every shard closed (the fence)
//	any       --leave-------->  leaving: drain, clear this holder in the table, done
//
// An answer that arrives in another phase (after a fence or a leave
// abandoned its step) changes nothing.

// input is something that happened.
type input interface{ isInput() }

type (
	// membersSeen is the membership's view at now: this incarnation
	// (Identity#incarnation, "" until it joined) and the live members.
	membersSeen struct {
		holder  string
		members []string
		now     time.Time
	}
	// drained: no reconcile is in flight in a shard that is releasing,
	// except in busy: those stay releasing, for a later step.
	drained   struct{ busy []int }
	tableRead struct { // the ring's table as read
		holders []string        // holders[v] holds shard v; "" for none
		expired map[string]bool // the holders in it whose membership Expired
	}
	tableWritten  struct{}                // the write of the table succeeded
	tableConflict struct{}                // someone wrote the table since it was read
	failed        struct{ err error }     // the request of this step failed
	relisted      struct{}                // the caches reflect the selector
	lapsed        struct{ cause error }   // the membership could not renew in time: stop everything now
	leave         struct{ holder string } // graceful stop; holder is this incarnation, "" if none joined
)

func (membersSeen) isInput()   {}
func (drained) isInput()       {}
func (tableRead) isInput()     {}
func (tableWritten) isInput()  {}
func (tableConflict) isInput() {}
func (failed) isInput()        {}
func (relisted) isInput()      {}
func (lapsed) isInput()        {}
func (leave) isInput()         {}

// action is something to do.
type action interface{ isAction() }

type (
	wakeAt struct{ at time.Time } // step again at (the join grace ends)
	// drain (request): say which releasing shards have reconciles in
	// flight (all: first wait until none has); a shard still busy
	// DrainTimeout after it began releasing has its reconciles cancelled.
	drain struct{ all bool }
	// readTable (request): read the ring's table, creating it if missing;
	// bound the request by timeout unless it is 0.
	readTable struct{ timeout time.Duration }
	// writeTable (request): write holders over the table last read, only
	// if nobody wrote it since.
	writeTable struct {
		holders []string
		timeout time.Duration
	}
	relist      struct{}               // (request) make the caches list again with the selector
	setSelector struct{ sel Selector } // the shards this replica lists and watches
	stop        struct {               // cancel the in-flight reconciles of shards
		shards []int
		cause  error
	}
	lost struct { // the table gives shard, open here, to holder: stopped, and said
		shard  int
		holder string
	}
	opened struct { // shards opened: queue their objects
		shards []int
		owned  int
	}
	handoff struct { // count n shards released or taken over
		kind string
		n    int
	}
	left struct{ released bool } // the leave is over; released: the table no longer names this holder
)

func (wakeAt) isAction()      {}
func (drain) isAction()       {}
func (readTable) isAction()   {}
func (writeTable) isAction()  {}
func (relist) isAction()      {}
func (setSelector) isAction() {}
func (stop) isAction()        {}
func (lost) isAction()        {}
func (opened) isAction()      {}
func (handoff) isAction()     {}
func (left) isAction()        {}

// state is one virtual shard's state on this replica.
type state uint8

const (
	closed    state = iota // not this replica's
	acquiring              // claimed in the table; caches relisting
	open                   // reconciled here
	releasing              // closed to new reconciles; draining before the table says so
)

type phase uint8

const (
	idle phase = iota
	draining
	reading
	writing
	relisting
	done // left the ring; nothing more happens
)

const (
	// maxTableReads bounds the reads of one step: each conflict costs one.
	maxTableReads = 21
	// leaveTimeout bounds each table request of a leave: the others take
	// the shards over after the lease duration anyway.
	leaveTimeout = 5 * time.Second
)

var errTableConflicts = errors.New("shard: writing the ring's table: it changed at every attempt")

// machine is the sharder's decision core. Its state is unguarded: the
// driver holds its lock around every call.
type machine struct {
	key     Key
	virtual int
	grace   time.Duration // a new incarnation claims nothing for this long

	states   []state
	holder   string    // the incarnation the states belong to
	joinedAt time.Time // when the machine first saw holder
	sel      Selector  // the last selector set
	relisted bool      // the caches reflect sel
	err      error     // why the last step failed; nil after one that did not

	phase     phase
	leaving   bool
	owners    []string // this step's assignment
	reads     int      // table reads in this step
	claim     []bool   // the shards the pending write claims
	takenOver int      // how many of them an expired holder held
	held      int      // leaving: the shards the table names this holder for
	busy      []bool   // this step's releasing shards not drained yet: released in a later step
}

func newMachine(key Key, virtual int, grace time.Duration) *machine {
	return &machine{key: key, virtual: virtual, grace: grace, states: make([]state, virtual),
		sel: SelectorOf(key, nil, virtual)}
}

// next is the transition function: it takes what happened and returns
// what to do, in order.
func (m *machine) next(in input) []action {
	if m.phase == done {
		return nil
	}
	switch in := in.(type) {
	case membersSeen:
		if m.phase == idle && !m.leaving {
			return m.onMembers(in)
		}
	case drained:
		if m.phase == draining {
			m.busy = make([]bool, m.virtual)
			for _, v := range in.busy {
				m.busy[v] = true
			}
			return m.afterDrain()
		}
	case tableRead:
		if m.phase == reading {
			return m.onRead(in)
		}
	case tableWritten:
		if m.phase == writing {
			return m.onWritten()
		}
	case tableConflict:
		if m.phase == writing {
			return m.onConflict()
		}
	case failed:
		if m.phase != idle {
			return m.onFailed(in.err)
		}
	case relisted:
		if m.phase == relisting {
			return m.onRelisted()
		}
	case lapsed:
		return m.onLapsed(in.cause)
	case leave:
		if !m.leaving {
			return m.onLeave(in)
		}
	}
	return nil
}

// onMembers starts a step: release what the members give others, then
// read the table.
func (m *machine) onMembers(in membersSeen) []action {
	if in.holder == "" {
		m.err = nil
		return nil // not joined yet
	}
	var acts []action
	if in.holder != m.holder { // a new incarnation starts from nothing, whatever the table says
		acts = m.closeAll(ErrLost)
		m.holder, m.joinedAt = in.holder, in.now
	}
	if at := m.joinedAt.Add(m.grace); in.now.Before(at) {
		// Join grace: replicas started together see each other before
		// any claims a share, rather than one claiming everything first.
		m.err = nil
		return append(acts, wakeAt{at: at})
	}
	id := identityOf(m.holder)
	members := in.members
	if !slices.Contains(members, id) {
		members = append(slices.Clone(members), id)
	}
	owners, err := Owners(members, m.virtual)
	if err != nil {
		m.err = err
		return acts
	}
	m.owners, m.reads, m.busy = owners, 0, nil
	for v, x := range m.states {
		if owners[v] != id && (x == open || x == acquiring) {
			m.states[v] = releasing // Enter says no from now on
		}
	}
	if slices.Contains(m.states, releasing) {
		m.phase = draining
		return append(acts, drain{})
	}
	return append(acts, m.read())
}

// afterDrain writes the table: this step's, or the leave's.
func (m *machine) afterDrain() []action {
	if m.leaving && m.holder == "" {
		return m.finishLeave(true)
	}
	return []action{m.read()}
}

func (m *machine) read() action {
	m.phase = reading
	m.reads++
	return readTable{timeout: m.timeout()}
}

func (m *machine) timeout() time.Duration {
	if m.leaving {
		return leaveTimeout
	}
	return 0
}

// onRead decides the table's next content: drained shards lose this
// holder; shards the owners give this replica are claimed if free, held
// by this incarnation, or held by an expired one; a shard open or
// acquiring here that the table gives another is stopped at once.
func (m *machine) onRead(in tableRead) []action {
	if m.leaving {
		return m.onReadLeaving(in)
	}
	id := identityOf(m.holder)
	next := slices.Clone(in.holders)
	m.claim, m.takenOver = make([]bool, m.virtual), 0
	var acts []action
	for v, x := range m.states {
		h := in.holders[v]
		switch {
		case x == releasing && m.busy != nil && m.busy[v]:
			// still draining: this holder keeps it in the table until a later step
		case x == releasing || (x == closed && h == m.holder && m.owners[v] != id):
			if h == m.holder {
				next[v] = ""
			}
		case (x == open || x == acquiring) && h != m.holder:
			m.states[v] = releasing
			acts = append(acts, lost{shard: v, holder: h})
		case x == closed && m.owners[v] == id && (h == "" || h == m.holder || in.expired[h]):
			next[v], m.claim[v] = m.holder, true
			if h != "" && h != m.holder {
				m.takenOver++
			}
		}
	}
	if slices.Equal(next, in.holders) {
		return append(acts, m.onWritten()...)
	}
	m.phase = writing
	return append(acts, writeTable{holders: next, timeout: m.timeout()})
}

// onWritten applies what the table now says: released shards close,
// claimed ones are acquired; the caches list again if the selector moved.
func (m *machine) onWritten() []action {
	if m.leaving {
		return m.finishLeave(true)
	}
	var acts []action
	released := 0
	for v := range m.states {
		switch {
		case m.states[v] == releasing && (m.busy == nil || !m.busy[v]):
			m.states[v] = closed
			released++
		case m.claim[v]:
			m.states[v] = acquiring
		}
	}
	m.claim = nil
	if released > 0 {
		acts = append(acts, handoff{kind: "released", n: released})
	}
	if m.takenOver > 0 {
		acts = append(acts, handoff{kind: "taken_over", n: m.takenOver})
	}
	acts = append(acts, m.publish()...)
	if m.relisted {
		m.phase, m.err = idle, nil
		return acts
	}
	m.phase = relisting
	return append(acts, relist{})
}

// publish sets the selector to the shards open or acquiring, and those
// releasing that are still draining (a reconcile in flight keeps its
// objects cached), if it moved.
func (m *machine) publish() []action {
	var vs []int
	for v, x := range m.states {
		if x == open || x == acquiring || x == releasing && m.busy != nil && m.busy[v] {
			vs = append(vs, v)
		}
	}
	sel := SelectorOf(m.key, vs, m.virtual)
	if sel.String() == m.sel.String() {
		return nil
	}
	m.sel, m.relisted = sel, false
	return []action{setSelector{sel: sel}}
}

func (m *machine) onConflict() []action {
	if m.reads >= maxTableReads {
		return m.onFailed(errTableConflicts)
	}
	return []action{m.read()}
}

// onFailed ends the step; what it changed so far stays (a releasing shard
// stays closed to reconciles, an acquiring one stays shut until a relist
// works).
func (m *machine) onFailed(err error) []action {
	if m.leaving {
		return m.finishLeave(false)
	}
	m.phase, m.err = idle, err
	return nil
}

// onRelisted opens the shards acquired: the caches now hold their objects.
func (m *machine) onRelisted() []action {
	m.phase, m.relisted, m.err = idle, true, nil
	var vs []int
	n := 0
	for v, x := range m.states {
		if x == acquiring {
			m.states[v] = open
			vs = append(vs, v)
		}
		if m.states[v] == open {
			n++
		}
	}
	if len(vs) == 0 {
		return nil
	}
	return []action{opened{shards: vs, owned: n}}
}

// onLapsed is the fence: every shard closes at once and its reconciles are
// cancelled; the step under way, if any, is abandoned.
func (m *machine) onLapsed(cause error) []action {
	acts := m.closeAll(cause)
	m.phase = idle
	if m.leaving {
		m.phase = done
	}
	return acts
}

// onLeave closes every shard to new reconciles and drains them; then the
// table is written without this holder (onReadLeaving).
func (m *machine) onLeave(in leave) []action {
	m.leaving, m.holder, m.reads = true, in.holder, 0
	for v, x := range m.states {
		if x != closed {
			m.states[v] = releasing
		}
	}
	m.phase = draining
	return []action{drain{all: true}}
}

func (m *machine) onReadLeaving(in tableRead) []action {
	next := slices.Clone(in.holders)
	n := 0
	for v, h := range next {
		if h == m.holder {
			next[v] = ""
			n++
		}
	}
	if n == 0 {
		return m.finishLeave(true)
	}
	m.phase, m.held = writing, n
	return []action{writeTable{holders: next, timeout: leaveTimeout}}
}

// finishLeave ends a leave; released: the table no longer names this
// holder.
func (m *machine) finishLeave(released bool) []action {
	var acts []action
	if released && m.held > 0 {
		acts = append(acts, handoff{kind: "released", n: m.held})
	}
	acts = append(acts, m.closeAll(ErrLost)...)
	m.phase = done
	return append(acts, left{released: released})
}

// closeAll closes every shard at once, cancelling its reconciles.
func (m *machine) closeAll(cause error) []action {
	var vs []int
	for v, x := range m.states {
		if x != closed {
			m.states[v] = closed
			vs = append(vs, v)
		}
	}
	var acts []action
	if len(vs) > 0 {
		acts = append(acts, stop{shards: vs, cause: cause})
	}
	acts = append(acts, m.publish()...)
	m.relisted = false
	return acts
}

// count returns how many shards are in x.
func (m *machine) count(x state) int {
	n := 0
	for _, y := range m.states {
		if y == x {
			n++
		}
	}
	return n
}

// identityOf returns the Identity of a holder, Identity#incarnation.
func identityOf(holder string) string {
	id, _, _ := strings.Cut(holder, "#")
	return id
}
