package reflector

import (
	"errors"
	"time"
)

// Modes of Stats.Mode: how the reflector's last full synchronisation read
// the server's state.
const (
	ModeWatchList = "watch-list" // a watch that streams the initial state
	ModePaginated = "paginated"  // LIST requests, page by page
)

// Stats is a snapshot of a reflector's state, for a debug page or a
// readiness check. Times are zero when the thing has not happened yet.
type Stats struct {
	// Mode is ModeWatchList or ModePaginated; "" before the first sync.
	Mode string
	// ResourceVersion is LastSyncResourceVersion.
	ResourceVersion string
	// Syncs counts full synchronisations started, the first included (a
	// list retried after a failure counts again).
	Syncs uint64
	// LastSync is when the last full synchronisation started, and
	// LastSyncCause why: "" for the first, else the error or rule that
	// made the reflector list again (410 Gone, a watch that failed, ...).
	LastSync      time.Time
	LastSyncCause string
	// WatchSince is when the open watch started; zero while none is open.
	WatchSince time.Time
	// ListErrors and WatchErrors count failed lists and watches.
	ListErrors, WatchErrors uint64
	// LastError is the last list or watch error, kept after recovery (see
	// LastError for the current one), and LastErrorAt when it happened.
	LastError   string
	LastErrorAt time.Time
	// FailingSince is when the current run of failures began: the first
	// list or watch that failed since the last list that succeeded or
	// watch that opened. It is zero while the last one succeeded. A
	// readiness check compares it with a bound (see package manager).
	FailingSince time.Time
}

// Stats returns a snapshot of the reflector's state. It takes one short
// lock and allocates nothing; safe for concurrent use.
func (r *Reflector[T]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.ResourceVersion = r.lastRV
	return st
}

// noteAction records the start of a full synchronisation. It is called by
// the goroutine running the reflector for every action it takes.
func (r *Reflector[T]) noteAction(a action) {
	var mode string
	var cause error
	switch a := a.(type) {
	case list:
		if a.cont != "" {
			return
		}
		mode, cause = ModePaginated, a.cause
		if cause == nil && a.fallback != nil {
			cause = a.fallback
		}
	case watchReq:
		if !a.sendInitial {
			return
		}
		mode, cause = ModeWatchList, a.cause
	default:
		return
	}
	now := r.opts.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Mode = mode
	r.stats.Syncs++
	r.stats.LastSync = now
	r.stats.LastSyncCause = ""
	if cause != nil {
		r.stats.LastSyncCause = shortCause(cause)
	}
}

// noteWatch records that a watch opened (at now) or closed (zero now).
func (r *Reflector[T]) noteWatch(now time.Time) {
	r.mu.Lock()
	r.stats.WatchSince = now
	r.mu.Unlock()
}

// noteErrLocked counts a list or watch failure; it starts a run of
// failures unless one is under way.
func (r *Reflector[T]) noteErrLocked(err error) {
	var e *Error
	if errors.As(err, &e) && e.Op == OpList {
		r.stats.ListErrors++
	} else {
		r.stats.WatchErrors++
	}
	r.stats.LastError = err.Error()
	r.stats.LastErrorAt = r.opts.Clock.Now()
	if r.stats.FailingSince.IsZero() {
		r.stats.FailingSince = r.stats.LastErrorAt
	}
}
