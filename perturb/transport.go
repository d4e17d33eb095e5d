package perturb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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
	Status int // 0 when the request failed
	At     time.Duration
}

func (w Write) String() string {
	return fmt.Sprintf("#%d %s %s -> %d (+%s)", w.N, w.Method, w.Path, w.Status, w.At.Round(time.Millisecond))
}

// transport sits between one run of the controller and the API server. It
// records the controller's writes, holds back the watch streams of chosen
// resources (stale reads: the informer's cache stops moving), and crashes
// the controller right after a chosen write: every later request fails,
// and crash is called (it cancels the run).
type transport struct {
	next  http.RoundTripper
	start time.Time

	mu         sync.Mutex
	writes     []Write
	crashAfter int // 0: never
	crashed    bool
	crash      func()
	held       map[string]chan struct{} // resource -> closed when released
}

func newTransport(crashAfter int, crash func()) *transport {
	return &transport{start: time.Now(), crashAfter: crashAfter, crash: crash, held: map[string]chan struct{}{}}
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
	t.mu.Lock()
	crashed, next := t.crashed, t.next
	t.mu.Unlock()
	if crashed {
		return nil, ErrCrashed
	}
	resp, err := next.RoundTrip(req)
	if isWrite(req.Method) && !isLeaseOrReview(req.URL.Path) {
		t.recordWrite(req, resp)
	}
	if err != nil || req.URL.Query().Get("watch") != "true" {
		return resp, err
	}
	resp.Body = &heldBody{ReadCloser: resp.Body, t: t, resource: resourceOf(req.URL.Path), ctx: req.Context()}
	return resp, nil
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
	}
}

// gate returns a channel closed when resource is not held, nil if it is
// not held now.
func (t *transport) gate(resource string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held[resource]
}

// resourceOf returns the resource of a collection's path: "configmaps" in
// /api/v1/namespaces/ns/configmaps and /apis/apps/v1/deployments.
func resourceOf(path string) string {
	path = strings.TrimRight(path, "/")
	return path[strings.LastIndexByte(path, '/')+1:]
}

// heldBody is a watch stream that blocks while its resource is held.
type heldBody struct {
	io.ReadCloser
	t        *transport
	resource string
	ctx      context.Context
}

func (b *heldBody) Read(p []byte) (int, error) {
	if g := b.t.gate(b.resource); g != nil {
		select {
		case <-g:
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		}
	}
	return b.ReadCloser.Read(p)
}
