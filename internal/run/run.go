// Package run holds what every component with a Run method shares: the
// error of a second Run. The public packages export it under their own
// names (informer.ErrStarted, controller.ErrStarted, ...), all one value.
package run

import "errors"

// ErrStarted reports a second call to a Run that may be called once, or a
// change that must come before Run.
var ErrStarted = errors.New("already started")
