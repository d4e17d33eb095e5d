package reflector

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ResumeState says how a state handed to ResumeFrom fared.
type ResumeState int

const (
	// ResumeNone: ResumeFrom was not called; the reflector synced by
	// listing.
	ResumeNone ResumeState = iota
	// ResumePending: the reflector is watching from the state's resource
	// version and the server has not yet answered.
	ResumePending
	// ResumeAccepted: the server had the history after that version; the
	// held relist ended there (no list was needed).
	ResumeAccepted
	// ResumeRefused: the server no longer had that history (410 Gone),
	// did not have it yet (the version is newer than the server's), or
	// failed otherwise; a sync followed.
	ResumeRefused
)

func (s ResumeState) String() string {
	switch s {
	case ResumePending:
		return "pending"
	case ResumeAccepted:
		return "accepted"
	case ResumeRefused:
		return "refused"
	}
	return "none"
}

// Resume is what became of the state handed to ResumeFrom.
type Resume struct {
	State           ResumeState
	ResourceVersion string // the state's resource version
	// Err says why the server refused it (a *Error where the server
	// answered with one), with State ResumeRefused.
	Err error
	// Comparable is false when the state's versions cannot be compared
	// with the server's (the server said the version is newer than its
	// own): a sink must then treat the sync that follows as a cold one, not
	// as changes against the state it held.
	Comparable bool
}

// ErrResumeNeedsRelistSink reports ResumeFrom on a reflector whose sink
// cannot hold a relist open (is not a RelistSink).
var ErrResumeNeedsRelistSink = errors.New("reflector: resuming needs a RelistSink")

// ResumeFrom makes the next Run or ListAndWatch start from a state the sink
// already holds, instead of listing: before the call, the caller has begun
// a relist on the sink (BeginRelist) and given it the state's objects
// (RelistItems), e.g. read from a snapshot on disk; resourceVersion is the
// version they are current at. The reflector then watches from that
// version with a short server-side timeout and:
//
//   - when the server sends any event or bookmark, or ends that watch
//     cleanly, it has the history after the version: the reflector ends
//     the relist (EndRelist at the version) and carries on watching, having
//     listed nothing;
//   - when the server answers 410 Gone or "too large resource version",
//     or fails otherwise, it synchronises as usual (a BeginRelist that
//     supersedes the held relist), from a consistent read.
//
// Resume reports which. Call it before Run, never during. It fails on a
// sink that is not a RelistSink or an empty version.
func (r *Reflector[T]) ResumeFrom(resourceVersion string) error {
	if r.relistSink == nil {
		return fmt.Errorf("%w: %T", ErrResumeNeedsRelistSink, r.sink)
	}
	if resourceVersion == "" {
		return errors.New("reflector: ResumeFrom needs a resource version")
	}
	r.m.resumeRV = resourceVersion
	r.mu.Lock()
	r.resume = Resume{State: ResumePending, ResourceVersion: resourceVersion, Comparable: true}
	r.mu.Unlock()
	return nil
}

// ResumeWhileLoading is ResumeFrom for a state the sink is still being
// given (its relist begun, its objects arriving), so that the server's
// confirmation overlaps the loading: the next Run probes the server and
// watches from resourceVersion at once, but holds its first call to the
// sink, and everything after it, until ready is called. ready(nil) says the
// sink now holds the whole state: the resume goes on as ResumeFrom's.
// ready(err) says the state was abandoned halfway: the reflector
// synchronises as from the start, and Resume reports the state refused
// with err, its versions not comparable, so a sink does not trust the part
// it holds. The reflector notices an abandonment at its next action: at
// the latest when the resuming watch ends (a second on a quiet resource).
// Call it before Run, never during; call ready once, from any goroutine.
// It fails as ResumeFrom does.
func (r *Reflector[T]) ResumeWhileLoading(resourceVersion string) (ready func(error), err error) {
	if err := r.ResumeFrom(resourceVersion); err != nil {
		return nil, err
	}
	hold := make(chan error, 1)
	r.hold = hold
	var once sync.Once
	return func(err error) { once.Do(func() { hold <- err }) }, nil
}

// loaded returns ResumeWhileLoading's ready error once it was called,
// waiting for it when wait is set (else nil if it was not called yet); ok
// is false when ctx ended first.
func (r *Reflector[T]) loaded(ctx context.Context, wait bool) (err error, ok bool) {
	if !wait {
		select {
		case err = <-r.hold:
			r.hold = nil
		default:
		}
		return err, true
	}
	select {
	case err = <-r.hold:
		r.hold = nil
		return err, true
	case <-ctx.Done():
		return nil, false
	}
}

// touchesSink reports whether doing a reaches the sink (or the resume's
// outcome), which a state still loading holds back: everything but the
// resume's probe, watches and waits. (A list other than the probe may tell
// the sink its size.)
func touchesSink(a action) bool {
	switch a := a.(type) {
	case list:
		return !a.probe
	case watchReq, wait:
		return false
	}
	return true
}

// Resume returns what became of the state handed to ResumeFrom. It is set
// before the sink hears of it: a sink that takes the superseding
// BeginRelist, or the ending EndRelist, reads the outcome that caused it.
// Safe for concurrent use.
func (r *Reflector[T]) Resume() Resume {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resume
}

func (r *Reflector[T]) setResume(state ResumeState, err error, comparable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resume.State == ResumeRefused && !r.resume.Comparable {
		comparable = false // once not comparable, for good
	}
	r.resume.State, r.resume.Err, r.resume.Comparable = state, err, comparable
}
