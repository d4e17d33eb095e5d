package perturb

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// actions records the writes the test makes through Env.Kube: the
// workload's, shown in a failure's writes beside the controller's
// (Write.Test). Trials run one
// at a time; begin starts a trial's record.
type actions struct {
	mu     sync.Mutex
	began  time.Time
	writes []Write
}

// begin starts the record of a trial that began at began.
func (a *actions) begin(began time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.began, a.writes = began, nil
}

// list returns the trial's writes so far.
func (a *actions) list() []Write {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.writes)
}

// wrap returns a copy of cfg whose writes a records.
func (a *actions) wrap(cfg *rest.Config) *rest.Config {
	return wrapConfig(cfg, func(rt http.RoundTripper) http.RoundTripper { return &recording{a: a, next: rt} })
}

// recording is a in front of one client's round tripper.
type recording struct {
	a    *actions
	next http.RoundTripper
}

func (r *recording) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if isWrite(req.Method) && !isRuntimes(req.URL.Path) {
		w := Write{Test: true, Method: req.Method, Path: req.URL.Path}
		if resp != nil {
			w.Status = resp.StatusCode
		}
		r.a.mu.Lock()
		w.N, w.At = len(r.a.writes)+1, time.Since(r.a.began)
		r.a.writes = append(r.a.writes, w)
		r.a.mu.Unlock()
	}
	return resp, err
}

// WrappedRoundTripper returns the round tripper r wraps.
func (r *recording) WrappedRoundTripper() http.RoundTripper { return r.next }

// note records what the trial did at this point (Write.Note).
func (a *actions) note(what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes = append(a.writes, Write{Test: true, Note: what, At: time.Since(a.began)})
}
