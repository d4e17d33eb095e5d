// Package leakcheck fails a test that leaves goroutines behind.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Check records the goroutines running now and, when t ends, fails it if
// any new goroutine is still running. Call it first in a test: cleanups run
// last-in first-out, so the check runs after every cleanup registered later
// (servers closed, informers stopped). goleak retries for a while before it
// reports, so goroutines that are exiting are not flagged.
func Check(t testing.TB) {
	t.Helper()
	existing := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, existing) })
}
