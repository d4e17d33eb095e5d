package informer

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// warmStart decides how an informer's cache starts, warm from a snapshot
// or cold, from what it is told: the snapshot's load (unusable, failed,
// loaded) and the relists the processing goroutine meets, with the
// reflector's verdict on the snapshot's resource version (reflector.Resume:
// pending, accepted once the server sent an event or a bookmark after it,
// refused on 410 Gone, a version newer than the server's, or a failure).
// It is a pure machine: no lock, no IO, no clock; snapshots drives it
// under its lock. docs/design/warm-restart.md draws it.
//
// Its phases: pending (nothing loaded, nothing decided), loaded (a
// snapshot's objects are in the FIFO as a relist held open; the server
// has not answered), refused (loaded, and the reflector's relist that
// supersedes it has begun), partial (cold after part of a snapshot was
// applied: the next relist must distrust the versions it compares), cold
// and warm (decided).
type warmStart struct {
	start   CacheStart
	loaded  bool // a snapshot was loaded and its resume is not decided
	partial bool // a snapshot was refused after some of it was applied
	begins  int  // relists begun so far; the first is the snapshot's own, when one was loaded
	off     bool // write no snapshot this run
}

// Phases of warmStart, for its table test and the design note.
const (
	phasePending = "pending"
	phaseLoaded  = "loaded"
	phaseRefused = "refused"
	phasePartial = "partial"
	phaseCold    = "cold"
	phaseWarm    = "warm"
)

// phase names w's phase.
func (w *warmStart) phase() string {
	switch {
	case w.loaded && w.start.Reason != "":
		return phaseRefused
	case w.loaded:
		return phaseLoaded
	case w.partial:
		return phasePartial
	case w.start.Decided && w.start.Warm:
		return phaseWarm
	case w.start.Decided:
		return phaseCold
	}
	return phasePending
}

// unusable: no snapshot can be read or written this run (the cluster's
// identity is unknown, another user could write the directory): the start
// is cold for reason.
func (w *warmStart) unusable(reason string) {
	w.off = true
	w.decide(CacheStart{Reason: reason})
}

// loadFailed: the snapshot could not be read (missing, of another
// identity, corrupt, untrusted) or was abandoned halfway (begun: some of
// its objects went to the FIFO): the start is cold for reason, and after a
// partial load the relist that follows the abandoned one distrusts the
// versions it compares. A load cut short because the informer is stopping
// decides nothing.
func (w *warmStart) loadFailed(reason string, begun, stopping bool) {
	if begun {
		w.partial = true
	}
	if !stopping {
		w.decide(CacheStart{Reason: reason})
	}
}

// loadedSnapshot: the snapshot's objects are all in the FIFO, at
// resourceVersion; the server's answer decides.
func (w *warmStart) loadedSnapshot(objects int, resourceVersion string) {
	w.loaded = true
	w.start = CacheStart{Objects: objects, ResourceVersion: resourceVersion}
}

// decide makes start the decided start, forgetting any load.
func (w *warmStart) decide(start CacheStart) {
	start.Decided = true
	w.start, w.loaded = start, false
}

// relistBegins: a relist begins, as the processing goroutine meets it, the
// reflector's verdict being resume. It reports whether the relist must
// tell handlers of every object as changed: the versions it would compare
// are not to be trusted (a snapshot refused after part of it was applied,
// or one whose versions the server said are newer than its own).
func (w *warmStart) relistBegins(resume reflector.Resume) (distrust bool) {
	w.begins++
	// A snapshot abandoned after some of it was applied: the relist after
	// its own (which the processing goroutine may meet only after the
	// abandonment) must not trust its versions.
	if w.partial && w.begins > 1 {
		w.partial = false
		return true
	}
	if !w.loaded || resume.State != reflector.ResumeRefused {
		return false
	}
	w.start.Reason = refusedReason(resume)
	return !resume.Comparable
}

// relistEnds: a relist ended and the informer is synced: the start is
// decided, warm when the server accepted the loaded snapshot's version.
func (w *warmStart) relistEnds(resume reflector.Resume) {
	// A relist ended: a refused snapshot's parts, if any was applied, were
	// distrusted by it, or none was (the FIFO superseded them unapplied).
	w.partial = false
	if w.start.Decided {
		return
	}
	w.start.Decided = true
	switch {
	case w.loaded && resume.State == reflector.ResumeAccepted && w.start.Reason == "":
		w.start.Warm = true
	case w.loaded && w.start.Reason == "":
		w.start.Reason = refusedReason(resume)
	case w.start.Reason == "": // the driver decides before a relist can end; for safety
		w.start.Reason = "no snapshot loaded"
	}
	w.loaded = false
}

// refusedReason says in a few words why the server did not take a
// snapshot's version.
func refusedReason(r reflector.Resume) string {
	switch {
	case r.Err == nil:
		return "the snapshot's resource version " + r.ResourceVersion + " was not confirmed"
	case !r.Comparable:
		return "the snapshot's resource version " + r.ResourceVersion + " is newer than the server's"
	case apierrors.IsResourceExpired(r.Err) || apierrors.IsGone(r.Err):
		return "the server no longer has resource version " + r.ResourceVersion
	}
	return "resuming from resource version " + r.ResourceVersion + " failed: " + r.Err.Error()
}
