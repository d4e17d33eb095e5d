// Package poll waits, in tests, for a condition on what the test does not
// drive step by step (a real API server, another process): it asks again
// at an interval until the condition holds or a bound passes. Goroutines
// of the test's own are synchronised with channels or testing/synctest,
// never with this.
package poll

import (
	"testing"
	"time"
)

// Until calls cond every interval until it holds, and fails t (naming
// what it waited for) once d has passed without it.
func Until(t testing.TB, d, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}
