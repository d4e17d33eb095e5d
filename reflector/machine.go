package reflector

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/object"
)

// The machine decides; run.go does the IO. Inputs are what happened, actions
// are what to do next. The machine holds no context, clock, goroutine or
// client: time arrives in inputs, randomness through rnd.

// input is something that happened.
type input interface{ isInput() }

type (
	start         struct{} // the reflector starts
	listed[T any] struct {
		items    []T
		rv, cont string
	} // a list page arrived
	listFailed struct {
		err error
		now time.Time
	}
	watchStarted struct{ now time.Time } // the server accepted a watch
	watchFailed  struct {                // the server refused a watch
		err error
		now time.Time
	}
	event[T any] struct { // an event with a usable object arrived
		typ        watch.EventType
		obj        T
		rv         string
		initialEnd bool // a bookmark marking the end of watch-list's initial events
	}
	watchEnded struct { // the event stream ended; err is nil for a clean close
		err error
		now time.Time
	}
	silent struct{ now time.Time } // a watch-list stream sent nothing for config.silence
	// relistRequested: the user asked for a full sync while watching.
	relistRequested struct{ cause error }
	// resumeAbandoned: the sink could not be given the whole resumed
	// state (Reflector.ResumeWhileLoading).
	resumeAbandoned struct{ cause error }
)

func (start) isInput()           {}
func (listed[T]) isInput()       {}
func (listFailed) isInput()      {}
func (watchStarted) isInput()    {}
func (watchFailed) isInput()     {}
func (event[T]) isInput()        {}
func (watchEnded) isInput()      {}
func (silent) isInput()          {}
func (relistRequested) isInput() {}
func (resumeAbandoned) isInput() {}

// action is something to do. list and watchReq replace any open watch.
type action interface{ isAction() }

type (
	list struct { // list one page
		rv    string
		limit int64
		cont  string
		probe bool  // only to learn the server's current RV (resuming)
		cause error // why this sync happens; nil for the first one and for a fallback
		// fallback is why the watch-list attempt of this sync was given up
		// for this list; nil when the sync began with a list.
		fallback error
		// again: this list carries on the sync in progress (a list at ""
		// after the RV expired, one whole list after a continue token
		// expired): no new sync begins, whatever its cause.
		again bool
	}
	watchReq struct { // start a watch; close any open one first
		rv          string
		sendInitial bool // watch-list: stream the initial state first
		timeout     time.Duration
		cause       error // for a watch-list: why this sync happens; nil for the first
		again       bool  // a watch-list carrying on the sync in progress (see list.again)
	}
	// A relist reaches the sink in parts as it arrives, never whole:
	// relistBegin, then relistItems and relistDelete, then relistEnd. A
	// relistBegin before the relistEnd of the previous one supersedes it.
	relistBegin        struct{}
	relistItems[T any] struct { // objects of the relist, upserted in order
		items  []T
		update bool // some may replace an object given earlier in this relist (watch-list MODIFIED)
	}
	relistDelete[T any] struct{ obj T }     // watch-list: an object deleted while the stream was sent
	relistEnd           struct{ rv string } // the sink's state is exactly what this relist gave, as of rv
	apply[T any]        struct {            // pass one event to the sink
		typ watch.EventType
		obj T
		rv  string // obj's resource version as it arrived
	}
	bookmark struct{ rv string } // the sink is current up to rv
	// resumed: the server accepted the resource version of a resumed
	// state; the relist the sink holds open (see Reflector.ResumeFrom) ends
	// as of rv.
	resumed struct{ rv string }
	// resumeRefused: the resumed state cannot be confirmed and a sync
	// follows; comparable is false when the server's versions cannot be
	// compared with the state's (it is newer than the server, or the sink
	// never got all of it: abandoned).
	resumeRefused struct {
		cause      error
		comparable bool
		abandoned  bool
	}
	wait struct { // wait d, then do then
		d    time.Duration
		then action
	}
)

func (list) isAction()            {}
func (watchReq) isAction()        {}
func (relistBegin) isAction()     {}
func (relistItems[T]) isAction()  {}
func (relistDelete[T]) isAction() {}
func (relistEnd) isAction()       {}
func (apply[T]) isAction()        {}
func (bookmark) isAction()        {}
func (resumed) isAction()         {}
func (resumeRefused) isAction()   {}
func (wait) isAction()            {}

type phase int

const (
	idle      phase = iota
	listing         // list pages arriving
	streaming       // watch-list: initial events arriving, until the end bookmark
	watching        // a watch is open (or being opened) after a sync
	resuming        // a watch from a resumed state's RV, until the server accepts it
)

// config is the machine's part of Options, with defaults applied.
type config struct {
	pageSize                                 int64
	explicitPageSize                         bool // the user chose pageSize: paginate every list
	minTimeout, maxTimeout                   time.Duration
	shortWatch                               time.Duration
	confirmTimeout                           time.Duration // the server-side timeout of a resuming watch
	silence                                  time.Duration // how long a watch-list stream may send nothing
	disableWatchList                         bool
	backoffInitial, backoffMax, backoffReset time.Duration
}

// machine is the reflector's decision core. Its state is unguarded: one
// goroutine, the driver, owns it.
type machine[T object.Object] struct {
	cfg     config
	rnd     func() float64 // in [0, 1)
	backoff backoff

	lastRV          string // the last resource version synced (list, event or bookmark)
	rvUnavailable   bool   // lastRV answered 410 or "too large": read at "" (consistent) next
	watchList       bool   // try watch-list; false once the server refused it, for good
	serverPaginates bool   // a list at "0" came back paginated: the watch cache is off
	synced          bool   // an initial list or stream has completed at least once
	// resumeRV is the resource version of a state the sink holds (see
	// Reflector.ResumeFrom), consumed by the next start; resumePending says
	// that state is neither confirmed nor superseded by a sync's end;
	// probed that the server's current RV was found no older than it.
	resumeRV              string
	resumePending, probed bool

	phase phase
	// listing: the pages received so far, the RV the list asked for,
	// whether this is the one-shot unpaginated retry after an expired
	// continue token.
	pages    int
	listRV   string
	fullList bool
	// streaming: the initial events received so far (the end bookmark
	// excepted) and those not yet passed on.
	streamed int
	batch    []T
	// watching: when the open watch started and how many events it carried.
	watchStart time.Time
	events     int
}

func newMachine[T object.Object](cfg config, rnd func() float64) *machine[T] {
	return &machine[T]{
		cfg: cfg, rnd: rnd, watchList: !cfg.disableWatchList,
		backoff: backoff{initial: cfg.backoffInitial, max: cfg.backoffMax, resetAfter: cfg.backoffReset},
	}
}

// next is the transition function: it takes what happened and returns what
// to do, in order.
func (m *machine[T]) next(in input) []action {
	switch in := in.(type) {
	case start:
		if m.resumeRV != "" {
			m.lastRV, m.resumeRV, m.resumePending = m.resumeRV, "", true
			return []action{m.probe()}
		}
		return m.sync(nil)
	case listed[T]:
		return m.onListed(in)
	case listFailed:
		return m.onListFailed(in)
	case watchStarted:
		m.watchStart, m.events = in.now, 0
		return nil
	case watchFailed:
		return m.onWatchFailed(in)
	case event[T]:
		return m.onEvent(in)
	case watchEnded:
		return m.onWatchEnded(in)
	case relistRequested:
		if m.phase != watching {
			return nil
		}
		return m.sync(in.cause)
	case resumeAbandoned:
		// The sink holds part of the state, unsynced: sync, telling the
		// sink not to trust the part it holds. It comes before the sink
		// heard anything (the reflector held it), so a confirmation the
		// machine already saw counts for nothing: nothing is synced yet.
		m.synced, m.resumePending = false, true
		return append([]action{resumeRefused{cause: in.cause, abandoned: true}}, carryOn(m.sync(in.cause))...)
	case silent:
		if m.phase != streaming {
			return nil
		}
		// A server that supports watch-list answers at once, if only with
		// the end bookmark of an empty collection; one that ignores the
		// request just waits for changes.
		m.watchList = false
		return m.fallBack(fmt.Errorf("%w: no event for %s", errWatchListIgnored, m.cfg.silence))
	}
	return nil
}

// sync starts a full synchronisation: a watch-list stream where the server
// supports it, a paginated list otherwise.
func (m *machine[T]) sync(cause error) []action {
	if m.watchList {
		m.phase, m.streamed, m.batch = streaming, 0, nil
		w := m.watchAction(m.rewatchRV(), true)
		w.cause = cause
		return []action{w}
	}
	return []action{m.startList(cause)}
}

func (m *machine[T]) startList(cause error) list {
	m.phase, m.pages, m.fullList, m.streamed, m.batch = listing, 0, false, 0, nil
	m.listRV = m.relistRV()
	return list{rv: m.listRV, limit: m.pageSize(m.listRV), cause: cause}
}

// relistRV: "0" first (any cached state will do), then the last synced RV
// (no older than what we have seen), and "" (a consistent read) once that
// RV has expired or is unknown to the server.
func (m *machine[T]) relistRV() string {
	switch {
	case m.rvUnavailable:
		return ""
	case m.lastRV == "":
		return "0"
	}
	return m.lastRV
}

func (m *machine[T]) rewatchRV() string {
	if m.rvUnavailable {
		return ""
	}
	return m.lastRV
}

// pageSize paginates lists that etcd serves. A list at a specific RV is sent
// whole so the watch cache can serve it, unless the server has shown that it
// paginates (no watch cache) or the user chose a page size.
func (m *machine[T]) pageSize(rv string) int64 {
	if rv != "" && rv != "0" && !m.serverPaginates && !m.cfg.explicitPageSize {
		return 0
	}
	return m.cfg.pageSize
}

func (m *machine[T]) watchAction(rv string, sendInitial bool) watchReq {
	d := m.cfg.minTimeout + time.Duration(m.rnd()*float64(m.cfg.maxTimeout-m.cfg.minTimeout))
	return watchReq{rv: rv, sendInitial: sendInitial, timeout: d}
}

func (m *machine[T]) onListed(in listed[T]) []action {
	if m.phase == resuming && !m.probed {
		return m.onProbed(in.rv)
	}
	if m.phase != listing {
		return nil
	}
	var acts []action
	if m.pages == 0 {
		acts = append(acts, relistBegin{})
	}
	m.pages++
	if len(in.items) > 0 {
		acts = append(acts, relistItems[T]{items: in.items})
	}
	if in.cont != "" {
		if m.listRV == "0" {
			m.serverPaginates = true
		}
		return append(acts, list{limit: m.cfg.pageSize, cont: in.cont})
	}
	m.pages = 0
	m.synced, m.rvUnavailable, m.resumePending = true, false, false
	m.lastRV = in.rv
	m.phase = watching
	return append(acts, relistEnd{rv: in.rv}, m.watchAction(m.lastRV, false))
}

func (m *machine[T]) onListFailed(in listFailed) []action {
	if m.phase == resuming && !m.probed {
		return m.onResumeFailed(in.err, in.now)
	}
	if m.phase != listing {
		return nil
	}
	switch {
	case isExpired(in.err) && m.pages > 0 && !m.fullList:
		// The continue token expired mid-list: list everything in one page,
		// once, at the RV the list began with (a new relist).
		m.pages, m.fullList = 0, true
		return []action{list{rv: m.listRV, cause: in.err, again: true}}
	case (isExpired(in.err) || isTooLarge(in.err)) && !m.rvUnavailable:
		m.rvUnavailable = true
		l := m.startList(in.err)
		l.again = true
		return append(m.distrustResumed(in.err), l)
	}
	retry := m.startList(in.err)
	return []action{wait{d: m.backoff.next(in.now, m.rnd()), then: retry}}
}

func (m *machine[T]) onWatchFailed(in watchFailed) []action {
	switch m.phase {
	case streaming:
		return m.onStreamFailed(in)
	case resuming:
		return m.onResumeFailed(in.err, in.now)
	}
	switch {
	case isRetriable(in.err):
		// The server is overloaded or unreachable: our state is still good,
		// so wait and watch again from where we were.
		again := m.watchAction(m.rewatchRV(), false)
		return []action{wait{d: m.backoff.next(in.now, m.rnd()), then: again}}
	case isExpired(in.err) || isTooLarge(in.err):
		return m.sync(in.err)
	}
	return m.resyncAfterBackoff(in.now, in.err)
}

// onStreamFailed handles a watch-list request that failed, or a stream that
// ended before its end bookmark. As in client-go: after 429 or a refused
// connection it waits and streams again (a list would fail too, or add
// load); after 410 or "too large" it streams again from a consistent RV;
// after anything else it lists for this sync, because progress by a list
// beats retrying a stream that a proxy, an aggregated API or a server bug
// keeps failing. Only a server that rejects sendInitialEvents is remembered;
// the next sync tries watch-list again.
func (m *machine[T]) onStreamFailed(in watchFailed) []action {
	switch {
	case isWatchListUnsupported(in.err):
		m.watchList = false
	case isRetriable(in.err):
		again := m.watchAction(m.rewatchRV(), true)
		m.streamed, m.batch = 0, nil // the stream starts over
		return []action{wait{d: m.backoff.next(in.now, m.rnd()), then: again}}
	case (isExpired(in.err) || isTooLarge(in.err)) && !m.rvUnavailable:
		m.rvUnavailable = true
		return append(m.distrustResumed(in.err), carryOn(m.sync(in.err))...)
	}
	return m.fallBack(in.err)
}

// onStreamEnded handles a watch-list stream the server closed cleanly
// before its end bookmark (its timeout ran out while the initial state was
// being sent). As in client-go, the stream starts over at once; only a
// stream that closed at once with nothing in it makes this sync list
// instead, since streaming again would loop.
func (m *machine[T]) onStreamEnded(now time.Time) []action {
	if m.streamed == 0 && now.Sub(m.watchStart) < m.cfg.shortWatch {
		return m.fallBack(errStreamEnded)
	}
	m.streamed, m.batch = 0, nil // the stream starts over
	return []action{m.watchAction(m.rewatchRV(), true)}
}

// carryOn marks the list or watch-list acts start as part of the sync in
// progress, not a new one.
func carryOn(acts []action) []action {
	for i, a := range acts {
		switch a := a.(type) {
		case list:
			a.again = true
			acts[i] = a
		case watchReq:
			a.again = true
			acts[i] = a
		}
	}
	return acts
}

// fallBack gives up this sync's watch-list attempt and lists instead.
func (m *machine[T]) fallBack(why error) []action {
	l := m.startList(nil)
	l.fallback = why
	return []action{l}
}

// resyncAfterBackoff waits, then synchronises from scratch.
func (m *machine[T]) resyncAfterBackoff(now time.Time, cause error) []action {
	d := m.backoff.next(now, m.rnd())
	acts := m.sync(cause)
	return []action{wait{d: d, then: acts[0]}}
}

func (m *machine[T]) onEvent(in event[T]) []action {
	switch m.phase {
	case streaming:
		return m.onInitialEvent(in)
	case resuming:
		// Any event or bookmark: the server accepted the version (it sends
		// "too old" as the first event of a watch it refuses).
		acts := m.confirm()
		m.watchEvent(in)
		if in.typ == watch.Bookmark {
			return append(acts, bookmark{rv: in.rv})
		}
		return append(acts, apply[T]{typ: in.typ, obj: in.obj, rv: in.rv})
	case watching:
		m.watchEvent(in)
		if in.typ == watch.Bookmark {
			return []action{bookmark{rv: in.rv}}
		}
		return []action{apply[T]{typ: in.typ, obj: in.obj, rv: in.rv}}
	}
	return nil
}

// watchEvent is next(event) for the hot path, without allocating: while
// watching, an event moves the resource version and is passed to the sink
// as it is (a bookmark as a bookmark). It reports false in any other phase,
// where the caller must use next.
func (m *machine[T]) watchEvent(in event[T]) bool {
	if m.phase != watching {
		return false
	}
	m.events++
	m.lastRV = in.rv
	return true
}

// relistBatch is how many initial events of a watch-list stream are passed
// on together.
const relistBatch = 500

// onInitialEvent passes watch-list's initial events on as a relist, in
// batches, until the end bookmark: ADDED events, and MODIFIED and DELETED
// events of objects that changed while the stream was being sent. Anything
// but ADDED as the first event means the server ignored sendInitialEvents
// (it sends only changes): list instead, and remember. A plain bookmark
// within the stream only says the server is making progress.
func (m *machine[T]) onInitialEvent(in event[T]) []action {
	switch {
	case in.typ == watch.Bookmark && in.initialEnd:
		var acts []action
		if m.streamed == 0 {
			acts = append(acts, relistBegin{})
		}
		acts = m.flushBatch(acts)
		m.streamed = 0
		m.synced, m.rvUnavailable, m.resumePending = true, false, false
		m.lastRV = in.rv
		m.phase, m.events = watching, 0
		return append(acts, relistEnd{rv: in.rv})
	case m.streamed == 0 && in.typ != watch.Added:
		m.watchList = false
		return m.fallBack(fmt.Errorf("%w: got %s first", errWatchListIgnored, in.typ))
	case in.typ == watch.Bookmark:
		return nil
	}
	var acts []action
	if m.streamed == 0 {
		acts = append(acts, relistBegin{})
	}
	m.streamed++
	switch in.typ {
	case watch.Deleted:
		return append(m.flushBatch(acts), relistDelete[T]{obj: in.obj})
	case watch.Modified:
		// It may replace an object of this relist: pass on what came
		// before it, then it alone, so the sink can upsert in order.
		acts = m.flushBatch(acts)
		return append(acts, relistItems[T]{items: []T{in.obj}, update: true})
	}
	m.batch = append(m.batch, in.obj)
	if len(m.batch) >= relistBatch {
		acts = m.flushBatch(acts)
	}
	return acts
}

// flushBatch appends the batched initial events, if any, to acts.
func (m *machine[T]) flushBatch(acts []action) []action {
	if len(m.batch) == 0 {
		return acts
	}
	acts = append(acts, relistItems[T]{items: m.batch})
	m.batch = nil
	return acts
}

func (m *machine[T]) onWatchEnded(in watchEnded) []action {
	switch m.phase {
	case streaming:
		if in.err == nil {
			return m.onStreamEnded(in.now)
		}
		return m.onWatchFailed(watchFailed(in))
	case resuming:
		if in.err == nil {
			// The watch ran its whole (short) timeout and the server never
			// said the version was too old: it accepted it.
			return append(m.confirm(), m.watchAction(m.lastRV, false))
		}
		return m.onResumeFailed(in.err, in.now)
	case watching:
	default:
		return nil
	}
	switch {
	case in.err == nil && m.events == 0 && in.now.Sub(m.watchStart) < m.cfg.shortWatch:
		// A watch that closes at once with nothing in it points to a server
		// or proxy problem that re-watching would turn into a hot loop.
		return m.resyncAfterBackoff(in.now, errVeryShortWatch)
	case in.err == nil:
		return []action{m.watchAction(m.lastRV, false)}
	case isExpired(in.err) || isTooLarge(in.err):
		return m.sync(in.err)
	case isRetriable(in.err):
		again := m.watchAction(m.lastRV, false)
		return []action{wait{d: m.backoff.next(in.now, m.rnd()), then: again}}
	}
	return m.resyncAfterBackoff(in.now, in.err)
}

// probe lists one object from a consistent read, to learn the server's
// current resource version: a resumed state newer than it is from another
// history (a restored etcd, another cluster behind the same name).
func (m *machine[T]) probe() list {
	m.phase, m.probed = resuming, false
	return list{limit: 1, probe: true}
}

// onProbed compares the server's current resource version with the
// resumed state's, and watches from the state's when it is not newer.
func (m *machine[T]) onProbed(current string) []action {
	if c, ok := object.CompareResourceVersions(m.lastRV, current); !ok || c > 0 {
		m.rvUnavailable = true
		err := fmt.Errorf("%w: %s, the server's is %s", errResumeNewer, m.lastRV, current)
		return append([]action{resumeRefused{cause: err, comparable: false}}, carryOn(m.sync(err))...)
	}
	m.probed = true
	return []action{m.resumeWatch()}
}

// resumeWatch watches from a resumed state's resource version with a short
// server-side timeout: the server sends "too old" as the first event of a
// watch it refuses, so a watch that runs out without one confirms the
// version, and a quiet resource (no event to send; the API server's
// bookmarks come two seconds before a watch's timeout, so none for a
// one-second watch) confirms it within about confirmTimeout rather than at
// the first change.
func (m *machine[T]) resumeWatch() watchReq {
	m.phase = resuming
	return watchReq{rv: m.lastRV, timeout: m.cfg.confirmTimeout}
}

// confirm ends the resumed state's relist: the server has the history
// after its version, so the watch carries on from there.
func (m *machine[T]) confirm() []action {
	m.phase, m.events = watching, 0
	m.synced, m.resumePending = true, false
	return []action{resumed{rv: m.lastRV}}
}

// onResumeFailed handles a resuming watch that failed or was refused: after
// 429 or a refused connection it waits and resumes again (the state is
// still as good); after 410 it syncs from a consistent read, which the sink
// compares with the resumed state; after "too large" (the state is newer
// than the server: another etcd, a restore from backup) likewise, but the
// resumed state's versions count for nothing; after anything else it backs
// off and syncs.
func (m *machine[T]) onResumeFailed(err error, now time.Time) []action {
	switch {
	case isRetriable(err) && !m.probed:
		return []action{wait{d: m.backoff.next(now, m.rnd()), then: m.probe()}}
	case isRetriable(err):
		return []action{wait{d: m.backoff.next(now, m.rnd()), then: m.resumeWatch()}}
	case isExpired(err) || isTooLarge(err):
		m.rvUnavailable = true
		return append([]action{resumeRefused{cause: err, comparable: !isTooLarge(err)}}, carryOn(m.sync(err))...)
	}
	return append([]action{resumeRefused{cause: err, comparable: true}}, m.resyncAfterBackoff(now, err)...)
}

// distrustResumed marks the resumed state, while its sync has not ended,
// as not comparable with the server's when err says its version is newer
// than the server's.
func (m *machine[T]) distrustResumed(err error) []action {
	if !m.resumePending || !isTooLarge(err) {
		return nil
	}
	return []action{resumeRefused{cause: err, comparable: false}}
}

// Causes the machine names itself.
var (
	errVeryShortWatch   = errors.New("reflector: watch closed at once without events")
	errStreamEnded      = errors.New("reflector: watch-list stream closed at once, empty, before its initial-events-end bookmark")
	errWatchListIgnored = errors.New("reflector: server ignored the watch-list request")
	errResumeNewer      = errors.New("reflector: the resumed state's resource version is newer than the server's")
)
