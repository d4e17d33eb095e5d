package perturb

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// apiError is an error a trial gives one write of the controller to the
// API server instead of its answer (Faults.APIErrors).
type apiError int

const (
	errConflict  apiError = iota // 409 Conflict, as when the object changed since it was read
	errThrottled                 // 429 Too Many Requests with Retry-After: 1, as from priority and fairness
	errInternal                  // 500 Internal Server Error
	errTimeout                   // a timeout before the request reaches the server
	errLost                      // the server applies it, the answer is lost (a timeout)
	apiErrors                    // how many there are
)

func (e apiError) String() string {
	return [...]string{"409 Conflict", "429 Too Many Requests (Retry-After: 1)", "500 Internal Server Error",
		"a timeout before it reaches the server", "the server applies it, its answer is lost (a timeout)"}[e]
}

// ErrTimeout is what a write to the API server returns in a trial that
// gives it a timeout (Faults.APIErrors), whether the server applied it or
// not: a net.Error whose Timeout is true, as a request that timed out.
var ErrTimeout error = timeoutError("perturb: the request timed out")

// timeoutError is a net.Error that timed out: ErrTimeout's and
// ErrExternalTimeout's type.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// injectError answers req, a write of the controller's, with t.errKind.
func (t *transport) injectError(next http.RoundTripper, req *http.Request, cluster string) (*http.Response, error) {
	switch t.errKind {
	case errTimeout:
		t.recordWrite(req, nil, cluster, false, "not sent: "+t.errKind.String())
		return nil, ErrTimeout
	case errLost:
		resp, err := next.RoundTrip(req)
		if err != nil {
			t.recordWrite(req, resp, cluster, false, "")
			return resp, err
		}
		t.recordWrite(req, resp, cluster, false, "answer lost")
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, ErrTimeout
	}
	code, reason := map[apiError]int{errConflict: 409, errThrottled: 429, errInternal: 500}[t.errKind],
		map[apiError]string{errConflict: "Conflict", errThrottled: "TooManyRequests", errInternal: "InternalError"}[t.errKind]
	resp := status(req, code, reason, "perturb: "+t.errKind.String())
	if t.errKind == errThrottled {
		resp.Header.Set("Retry-After", "1")
	}
	t.recordWrite(req, resp, cluster, false, "not sent: "+t.errKind.String())
	return resp, nil
}

// status is a metav1.Status answer, as the API server sends for an error.
func status(req *http.Request, code int, reason, message string) *http.Response {
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%s,"reason":%q,"code":%d}`,
		strconv.Quote(message), reason, code)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// writesToServer is how many writes to the API server the run has sent or
// stalled.
func (t *transport) writesToServer() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.apiWrites
}
