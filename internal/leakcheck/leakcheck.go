// Package leakcheck fails a test that leaves goroutines behind, and
// measures the live heap a test compares before and after.
package leakcheck

import (
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// pooled are the goroutines of an HTTP client connection: client-go keeps
// one transport per configuration for the whole process, so a connection a
// test opened may stay in that pool, idle, after the test; it belongs to the
// pool, not to the test.
var pooled = []goleak.Option{
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}

// Check records the goroutines running now and, when t ends, fails it if
// any new goroutine is still running, other than an HTTP client's pooled
// connection's. Call it first in a test: cleanups run last-in first-out,
// so the check runs after every cleanup registered later (servers closed,
// informers stopped). goleak retries for a while before it reports, so
// goroutines that are exiting are not flagged.
func Check(t testing.TB) {
	t.Helper()
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, pooled...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// LiveHeap returns the heap in use after two collections (the second
// frees what the first found unreachable and finalised): the baseline a
// test compares after releasing something, to show it was collected.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
