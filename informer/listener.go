package informer

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/internal/fifo"
	"github.com/ctrlkit/ctrlkit/internal/peak"
	"github.com/ctrlkit/ctrlkit/object"
)

// maxUnmerged is how many notifications of one key a handler's backlog
// holds as they came; past it they are coalesced (merge), so a handler
// that lags holds at most that many per key.
const maxUnmerged = 16

// pendingKey is what one handler has yet to hear about one key.
type pendingKey[T object.Object] struct {
	ns    []notification[T] // oldest first, coalesced past maxUnmerged; may be empty
	since time.Time         // when the oldest of ns was queued
}

// listener feeds one handler from its own goroutine through a buffer that
// gives every notification, and coalesces those of a key once more than
// maxUnmerged wait, so its backlog is bounded by the number of distinct
// keys and a slow handler delays only itself.
type listener[T object.Object] struct {
	name   string
	h      handler.Handler[T]
	resync time.Duration
	inf    *SharedIndexInformer[T]
	panics atomic.Uint64

	// mu guards the fields below. Invariant: every key of order is in
	// pending once, and every key of pending is in order; initial is
	// the number of initial-list adds in pending plus those taken out
	// and not delivered yet (a removed or stopped listener's stay counted:
	// it never syncs).
	mu      sync.Mutex
	pending map[string]*pendingKey[T]
	order   fifo.Queue[string]
	// pendingPeak is pending's largest size since rebuilt: an initial
	// list can leave every key of the cache pending at once.
	pendingPeak peak.Tracker
	initial     int
	armed       bool // the handler has been given the whole cache
	removed     bool
	// syncedC is closed once armed with initial at 0 (see hasSynced),
	// which stays so: no notification after arming is an initial one.
	syncedC      chan struct{}
	syncedClosed bool

	// sink, if set, is h as a handler.Enqueuer: it is handed the events of
	// each of the informer's batches at the batch's end, on the informer's
	// goroutine, so nothing is ever pending for it. held keeps them until
	// the informer's flushHeldLocked; the informer's lock guards it.
	sink handler.Enqueuer[T]
	held []notification[T]

	wake chan struct{} // buffer 1: "pending may have grown"
	stop chan struct{} // closed by Remove
}

func newListener[T object.Object](i *SharedIndexInformer[T], name string, h handler.Handler[T], resync time.Duration) *listener[T] {
	l := &listener[T]{
		name: name, h: h, resync: resync, inf: i,
		pending: map[string]*pendingKey[T]{},
		wake:    make(chan struct{}, 1), stop: make(chan struct{}), syncedC: make(chan struct{}),
	}
	l.sink, _ = h.(handler.Enqueuer[T])
	return l
}

// maxHeld bounds the events held for an Enqueuer during a batch (a
// relist part, a late handler's replay of the cache): they are given to it
// whenever that many are held.
const maxHeld = 512

// enqueue merges n into the key's pending notifications, or holds it for
// an Enqueuer, which gets it with the batch's other events at the batch's
// end (flushHeld, from the informer's flushHeldLocked). It is called with
// the informer's lock held (so an Enqueuer hears of events in the
// informer's order), never blocks for long and runs no user code but an
// Enqueuer's.
func (l *listener[T]) enqueue(key string, n notification[T], now time.Time) {
	if l.sink != nil {
		n.Key = key
		l.held = append(l.held, n)
		if len(l.held) >= maxHeld {
			l.flushHeld()
		}
		return
	}
	l.mu.Lock()
	pk, ok := l.pending[key]
	if !ok {
		pk = &pendingKey[T]{since: now}
		l.pending[key] = pk
		l.pendingPeak.Grew(len(l.pending))
		l.order.Push(key)
	}
	before := countInitial(pk.ns)
	if len(pk.ns) < maxUnmerged {
		pk.ns = append(pk.ns, n) // every notification, as client-go's listeners give them
	} else {
		pk.ns = merge(compact(pk.ns), n)
	}
	l.initial += countInitial(pk.ns) - before
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// flushHeld hands an Enqueuer the events held for it during a batch, in
// one Enqueue call; if that panics, again one event at a time (when there
// were several), so a panic loses only the events it was raised on.
// Called with the informer's lock held.
func (l *listener[T]) flushHeld() {
	given := false
	l.guarded(0, func() {
		l.sink.Enqueue(l.held)
		given = true
	})
	if !given && len(l.held) > 1 {
		for k := range l.held {
			l.guarded(0, func() { l.sink.Enqueue(l.held[k : k+1]) })
		}
	}
	clear(l.held) // hold no object the cache has let go of
	l.held = l.held[:0]
}

// arm records that every initial-list notification has been queued.
func (l *listener[T]) arm() {
	l.mu.Lock()
	l.armed = true
	l.mu.Unlock()
}

// noteSynced closes syncedC if the handler has synced. The informer calls
// it once the events held for an Enqueuer were given to it (after
// flushHeldLocked), so that nothing of the initial list is still held.
func (l *listener[T]) noteSynced() {
	l.mu.Lock()
	l.noteSyncedLocked()
	l.mu.Unlock()
}

// noteSyncedLocked closes syncedC once the handler has synced.
func (l *listener[T]) noteSyncedLocked() {
	if !l.syncedClosed && l.armed && l.initial == 0 {
		l.syncedClosed = true
		close(l.syncedC)
	}
}

// next takes the oldest pending key and its notifications, if any.
func (l *listener[T]) next() (string, []notification[T], bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.order.Len() == 0 {
		return "", nil, false
	}
	key := l.order.Pop()
	ns := l.pending[key].ns
	delete(l.pending, key)
	l.pending = peak.Shrink(&l.pendingPeak, l.pending)
	return key, ns, true
}

// run delivers notifications until the informer stops or the handler is
// removed (what is pending then is dropped: the call in progress is the
// last), and replays the cache every resync period.
func (l *listener[T]) run(stopping <-chan struct{}) {
	var tick <-chan time.Time
	if l.resync > 0 {
		t := time.NewTicker(l.resync)
		defer t.Stop()
		tick = t.C
	}
	for {
		if _, ns, ok := l.next(); ok {
			for _, n := range ns {
				select {
				case <-stopping:
					return
				case <-l.stop:
					return
				default:
				}
				l.call(n)
			}
			continue
		}
		select {
		case <-stopping:
			return
		case <-l.stop:
			return
		case <-l.wake:
		case <-tick:
			l.inf.resyncListener(l)
		}
	}
}

// call delivers n.
func (l *listener[T]) call(n notification[T]) {
	initial := 0
	if n.Initial {
		initial = 1
	}
	l.guarded(initial, func() { n.Deliver(l.h) })
}

// guarded runs fn, which calls the handler, recovering and counting a panic
// so that the handler keeps receiving events; then it accounts for the
// initial-list adds fn delivered.
func (l *listener[T]) guarded(initial int, fn func()) {
	defer func() {
		if initial > 0 {
			l.mu.Lock()
			l.initial -= initial
			l.noteSyncedLocked()
			l.mu.Unlock()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			l.inf.log.Error("informer: handler panicked", "informer", l.inf.name, "handler", l.name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// hasSynced reports that the handler has returned from every initial-list
// notification.
func (l *listener[T]) hasSynced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.armed && l.initial == 0
}

// lag returns the number of keys pending and the age of the oldest.
func (l *listener[T]) lag(now time.Time) (keys int, oldest time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.order.Len() > 0 {
		oldest = now.Sub(l.pending[l.order.Front()].since)
	}
	return len(l.pending), oldest
}

func (l *listener[T]) remove() {
	l.inf.removeListener(l)
}

// Registration is one handler added to an informer.
type Registration struct {
	synced  func() bool
	syncedC <-chan struct{}
	remove  func()
}

// HasSynced reports that the informer has synced and this handler has
// returned from every notification of the initial list (for a handler added
// late: of the cache as it was when it was added). Safe for concurrent use.
func (r *Registration) HasSynced() bool { return r.synced() }

// Synced returns a channel closed once HasSynced reports true (it never
// is for a handler removed before then): a wait for it needs no polling, as
// client-go's HasSyncedChecker. Safe for concurrent use.
func (r *Registration) Synced() <-chan struct{} { return r.syncedC }

// Remove stops notifying the handler. It does not wait for a call in
// progress to return (it may be called from the handler itself, unless the
// handler is a handler.Enqueuer); the
// informer's Run waits for it. Calling it again does nothing.
func (r *Registration) Remove() { r.remove() }
