package lease

import (
	"sync"
	"time"
)

// Fence tells a replica when to stop its work: RenewDeadline after its last
// successful renewal was sent. The others count the Lease's expiry from no
// earlier than the moment they received that renewal, which is later, so
// the replica stops at least LeaseDuration − RenewDeadline before any of
// them may take over. A Fence is armed by the first renewal; it is safe for
// concurrent use.
type Fence struct {
	deadline time.Duration
	lapsed   chan struct{} // closed once the fence lapsed

	mu    sync.Mutex // guards the fields below
	last  time.Time  // when the last successful renewal was sent
	timer *time.Timer
	done  bool // lapsed or stopped
}

// NewFence returns an unarmed Fence with the given RenewDeadline.
func NewFence(renewDeadline time.Duration) *Fence {
	return &Fence{deadline: renewDeadline, lapsed: make(chan struct{})}
}

// Renewed records a renewal that succeeded and was sent at sent. A renewal
// older than the last one recorded changes nothing.
func (f *Fence) Renewed(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || !sent.After(f.last) {
		return
	}
	f.last = sent
	d := time.Until(sent.Add(f.deadline))
	if f.timer == nil {
		f.timer = time.AfterFunc(d, f.check)
		return
	}
	f.timer.Reset(d)
}

// check closes lapsed if the deadline has passed, or waits again if a
// renewal moved it meanwhile.
func (f *Fence) check() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if d := time.Until(f.last.Add(f.deadline)); d > 0 {
		f.timer.Reset(d)
		return
	}
	f.done = true
	close(f.lapsed)
}

// LastSent returns when the last successful renewal was sent (zero before
// the first).
func (f *Fence) LastSent() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Lapsed returns a channel that is closed once RenewDeadline has passed
// since the last successful renewal was sent: the work must stop now.
func (f *Fence) Lapsed() <-chan struct{} { return f.lapsed }

// Stop disarms the fence: Lapsed will not be closed unless it already is.
func (f *Fence) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	if f.timer != nil {
		f.timer.Stop()
	}
}
