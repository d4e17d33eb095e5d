package perturb

import (
	"context"
	"io"
	"net/http"
)

// ErrExternalTimeout is what a call to the application the controller
// manages returns, in a trial, when the trial drops it or loses its answer
// (Faults.ExternalTimeouts): a timeout, as the controller would see one
// (it is a net.Error whose Timeout is true, wrapped by net/http's client
// in a *url.Error). Nothing in it tells the two apart: in production
// nothing does.
var ErrExternalTimeout error = timeoutError("perturb: the call to the application timed out")

// External returns rt routed through the trial, for the controller's calls
// to the application it manages (a database's admin API, a cloud API
// behind a finalizer): build the controller's HTTP client for it with
// Transport: env.External(rt) in Run. Its writes (POST, PUT, PATCH,
// DELETE) are the controller's writes as its requests to the API server
// are: recorded (Write.External), counted for the crash and failover
// trials (a crash right after an external create, before the controller
// recorded what it created, is a trial), and checked in the fresh
// controller's run (one that succeeds changes the settled state). A
// Faults.ExternalTimeouts trial drops one of them or loses its answer.
// Outside a trial's run (the workload's Env) it returns rt.
func (e Env) External(rt http.RoundTripper) http.RoundTripper {
	if e.run == nil {
		return rt
	}
	return &external{t: e.run, next: rt}
}

// external is a run's transport in front of the round tripper of the
// controller's calls to its application.
type external struct {
	t    *transport
	next http.RoundTripper
}

func (x *external) RoundTrip(req *http.Request) (*http.Response, error) {
	return x.t.roundTripExternal(x.next, req)
}

// WrappedRoundTripper returns the round tripper x wraps.
func (x *external) WrappedRoundTripper() http.RoundTripper { return x.next }

// roundTripExternal sends a call to the application: stalled with the
// run, failed once it crashed, and for its dropCall-th write a timeout
// without sending it, for its loseCall-th the timeout after the
// application answered.
func (t *transport) roundTripExternal(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	write := isWrite(req.Method)
	stall, call := t.admit(write, true)
	if stall != nil {
		<-stall
		if write { // on its way, as the API server's writes (roundTrip)
			req = req.WithContext(context.WithoutCancel(req.Context()))
		}
	}
	if t.isCrashed() || write && t.crashesBefore(req, "", true) {
		return nil, ErrCrashed
	}
	if !write {
		return next.RoundTrip(req)
	}
	if call == t.dropCall {
		t.recordWrite(req, nil, "", true, "dropped")
		return nil, ErrExternalTimeout
	}
	resp, err := next.RoundTrip(req)
	if call != t.loseCall || err != nil {
		t.recordWrite(req, resp, "", true, "")
		return resp, err
	}
	t.recordWrite(req, resp, "", true, "answer lost")
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, ErrExternalTimeout
}

// externalWrites is how many external writes the run has sent or stalled.
func (t *transport) externalWrites() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls
}
