package perturb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// ErrCrashed is what every request of a crashed controller fails with.
var ErrCrashed = errors.New("perturb: the controller crashed here")

// Write is one write the controller made, as the history a failure prints.
type Write struct {
	N      int // 1 for the controller's first write in this run
	Method string
	Path   string
	Status int           // 0 when the request failed
	At     time.Duration // since the trial began
}

func (w Write) String() string {
	return fmt.Sprintf("#%d %s %s -> %d (+%s)", w.N, w.Method, w.Path, w.Status, w.At.Round(time.Millisecond))
}

// transport sits between one run of the controller and the API server. It
// records the controller's writes, holds back the watch streams of chosen
// resources (stale reads: the informer's cache stops moving), cuts them
// (relists), crashes the controller right after a chosen write (every
// later request fails, and crash is called: it cancels the run), and
// stalls it right before a chosen write (no request reaches the server
// until resume).
type transport struct {
	next  http.RoundTripper
	start time.Time

	mu         sync.Mutex
	writes     []Write
	crashAfter int // 0: never
	crashed    bool
	crash      func()
	stallAt    int                      // 0: never
	issued     int                      // writes sent or stalled so far
	stall      chan struct{}            // non-nil while stalled, closed by resume
	stalled    chan struct{}            // closed when the stall begins
	held       map[string]chan struct{} // resource -> closed when released
	streams    map[*heldBody]struct{}   // open watch streams
	gone       map[string]bool          // resource -> answer its next watch 410 Gone
	relisting  map[string]bool          // resource -> relisted, no read of it has succeeded since
	stirred    time.Duration            // since start: when a hold ended or a relist began reading
}

func newTransport(start time.Time, crashAfter, stallAt int, crash func()) *transport {
	return &transport{start: start, crashAfter: crashAfter, crash: crash, stallAt: stallAt, stalled: make(chan struct{}),
		held: map[string]chan struct{}{}, streams: map[*heldBody]struct{}{}, gone: map[string]bool{},
		relisting: map[string]bool{}}
}

// wrap returns a copy of cfg whose requests go through t.
func (t *transport) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		t.mu.Lock()
		t.next = rt
		t.mu.Unlock()
		return t
	})
	return cfg
}

// WrappedRoundTripper returns the transport t wraps, so that client-go's
// helpers (closing idle connections) reach it.
func (t *transport) WrappedRoundTripper() http.RoundTripper {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	watch := req.URL.Query().Get("watch") == "true"
	resource := resourceOf(req.URL.Path)
	if stall := t.stallFor(req); stall != nil {
		if isWrite(req.Method) { // a paused process's write goes out when it resumes
			<-stall
			req = req.WithContext(context.WithoutCancel(req.Context()))
		} else {
			select {
			case <-stall:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
	}
	t.mu.Lock()
	crashed, next, gone := t.crashed, t.next, watch && t.gone[resource]
	if gone {
		delete(t.gone, resource)
	}
	t.mu.Unlock()
	switch {
	case crashed:
		return nil, ErrCrashed
	case gone:
		return expired(req), nil
	}
	if watch {
		return t.roundTripWatch(next, req, resource)
	}
	resp, err := next.RoundTrip(req)
	if isWrite(req.Method) && !isLeaseOrReview(req.URL.Path) {
		t.recordWrite(req, resp)
	} else if req.Method == http.MethodGet {
		t.read(resource, resp)
	}
	return resp, err
}

// stallFor returns the channel req must wait on, nil when t is not
// stalled; the stall begins at the stallAt-th write of the controller.
func (t *transport) stallFor(req *http.Request) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if isWrite(req.Method) && !isLeaseOrReview(req.URL.Path) {
		t.issued++
		if t.issued == t.stallAt {
			t.stall = make(chan struct{})
			close(t.stalled)
		}
	}
	return t.stall
}

// resume ends a stall: the requests it held go out.
func (t *transport) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stall != nil {
		close(t.stall)
		t.stall = nil
		t.stirred = time.Since(t.start)
	}
}

// read notes a read of resource: the first that succeeds after a relist
// ends it (the informer is reading the resource's state again).
func (t *transport) read(resource string, resp *http.Response) {
	if resp == nil || resp.StatusCode >= 300 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.relisting[resource] {
		delete(t.relisting, resource)
		t.stirred = time.Since(t.start)
	}
}

// settling reports whether a perturbation is still under way: a hold not
// released, or a relist whose informer has not read again; and since when
// (from start) the last one has been over.
func (t *transport) settling() (busy bool, since time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held) > 0 || len(t.relisting) > 0 || t.stall != nil, t.stirred
}

// roundTripWatch opens a watch stream t can hold back and cut.
func (t *transport) roundTripWatch(next http.RoundTripper, req *http.Request, resource string) (*http.Response, error) {
	ctx, cut := context.WithCancel(req.Context())
	resp, err := next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cut()
		return resp, err
	}
	t.read(resource, resp)
	b := &heldBody{ReadCloser: resp.Body, t: t, resource: resource, ctx: ctx, cancel: cut}
	t.mu.Lock()
	t.streams[b] = struct{}{}
	t.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// expired is the answer to a watch the server can no longer serve from
// the client's resource version (its history was compacted): 410 Gone.
func expired(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"perturb: too old resource version (history compacted)","reason":"Expired","code":410}`
	return &http.Response{
		Status: "410 Gone", StatusCode: http.StatusGone, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// isLeaseOrReview tells the writes of the runtime (leases, access reviews)
// from the controller's.
func isLeaseOrReview(path string) bool {
	return strings.Contains(path, "/leases") || strings.Contains(path, "accessreviews")
}

func (t *transport) recordWrite(req *http.Request, resp *http.Response) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := Write{N: len(t.writes) + 1, Method: req.Method, Path: req.URL.Path, At: time.Since(t.start)}
	if resp != nil {
		w.Status = resp.StatusCode
	}
	t.writes = append(t.writes, w)
	if t.crashAfter > 0 && w.N == t.crashAfter && !t.crashed {
		t.crashed = true
		go t.crash()
	}
}

func (t *transport) isCrashed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.crashed
}

// history returns the writes so far.
func (t *transport) history() []Write {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Write(nil), t.writes...)
}

// hold stops delivering watch events of resource (e.g. "configmaps") until
// release.
func (t *transport) hold(resource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.held[resource]; !ok {
		t.held[resource] = make(chan struct{})
	}
}

func (t *transport) release(resource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.held[resource]; ok {
		close(c)
		delete(t.held, resource)
		t.stirred = time.Since(t.start)
	}
}

// relist makes the informers of resource list again, as after a
// compaction: its open watch streams end (what they had not delivered is
// lost), and the next watch of it is answered 410 Gone. It also releases
// a hold of resource.
func (t *transport) relist(resource string) {
	t.mu.Lock()
	t.gone[resource], t.relisting[resource] = true, true
	var cut []*heldBody
	for b := range t.streams {
		if b.resource == resource {
			cut = append(cut, b)
		}
	}
	t.mu.Unlock()
	for _, b := range cut {
		b.cutOff()
	}
	t.release(resource)
}

// gate returns a channel closed when resource is not held and t not
// stalled, nil if neither is the case now.
func (t *transport) gate(resource string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stall != nil {
		return t.stall
	}
	return t.held[resource]
}

// resourceOf returns the resource of a collection's path: "configmaps" in
// /api/v1/namespaces/ns/configmaps and /apis/apps/v1/deployments.
func resourceOf(path string) string {
	path = strings.TrimRight(path, "/")
	return path[strings.LastIndexByte(path, '/')+1:]
}

// heldBody is a watch stream that blocks while its resource is held, and
// ends (io.EOF, as a connection the server closed) once cut off.
type heldBody struct {
	io.ReadCloser
	t        *transport
	resource string
	ctx      context.Context
	cancel   context.CancelFunc // aborts the request
	cut      atomic.Bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.wait()
	if b.cut.Load() {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	b.wait()          // what arrived once the hold began is held too
	if b.cut.Load() { // what arrived as it was cut is lost with it
		return 0, io.EOF
	}
	return n, err
}

// wait blocks while the stream's resource is held or its transport
// stalled.
func (b *heldBody) wait() {
	for g := b.t.gate(b.resource); g != nil; g = b.t.gate(b.resource) {
		select {
		case <-g:
		case <-b.ctx.Done():
			return
		}
	}
}

// cutOff ends the stream: its reader sees io.EOF.
func (b *heldBody) cutOff() {
	b.cut.Store(true)
	b.cancel()
}

func (b *heldBody) Close() error {
	b.t.mu.Lock()
	delete(b.t.streams, b)
	b.t.mu.Unlock()
	b.cancel()
	return b.ReadCloser.Close()
}
