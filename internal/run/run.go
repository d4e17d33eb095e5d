// Package run holds what every component with a Run method shares: the
// guard of a Run that may be called once, and the error of a second Run.
// The public packages export the error under their own names
// (informer.ErrStarted, controller.ErrStarted, ...), all one value.
package run

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrStarted reports a second call to a Run that may be called once, or a
// change that must come before Run.
var ErrStarted = errors.New("already started")

// Once guards a Run that may be called once. Its methods are safe for
// concurrent use; a component that checks it together with other state
// (the handlers to start, the controllers to run) calls them under its own
// lock, so the check and that state are seen at once.
type Once struct{ started atomic.Bool }

// Start marks the Run started: nil on the first call, on later ones an
// error naming what (e.g. "informer configmaps") and wrapping ErrStarted.
func (o *Once) Start(what string) error {
	if o.started.Swap(true) {
		return fmt.Errorf("%s: %w", what, ErrStarted)
	}
	return nil
}

// Before returns nil until Start was called, then an error naming what
// and wrapping ErrStarted: for changes that must come before Run.
func (o *Once) Before(what string) error {
	if o.started.Load() {
		return fmt.Errorf("%s: %w", what, ErrStarted)
	}
	return nil
}

// Started reports whether Start was called.
func (o *Once) Started() bool { return o.started.Load() }
