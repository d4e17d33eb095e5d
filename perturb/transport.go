package perturb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/tracing"
)

// ErrCrashed is what every request of a crashed controller fails with;
// ErrClusterCut what every request to a cluster cut off fails with (see
// Faults.ClusterCuts).
var (
	ErrCrashed    = errors.New("perturb: the controller crashed here")
	ErrClusterCut = errors.New("perturb: this cluster is cut off")
)

// Write is one write the controller made, as the history a failure prints.
type Write struct {
	Cluster string // the cluster of Scenario.Clusters written to; "" for Scenario.Config's
	Replica string // "a", or "b" in a failover trial
	Restart int    // 0 in the replica's first run, n after its nth restart
	N       int    // 1 for the first write of this run
	Method  string
	Path    string
	Status  int           // 0 when the request failed
	At      time.Duration // since the trial began
	Ahead   time.Duration // how far the trial's Clock had jumped ahead of real time
	// External marks a write to the application the controller manages
	// (through Env.External); Path is then the URL's host and path.
	External bool
	// Fault is what the trial did to this write: "dropped" (it never
	// reached the application) or "answer lost" (Status is the
	// application's answer, the controller got a timeout); "" for none.
	Fault string
	// Test marks a write of the test's own (the workload's, through
	// Env.Kube), not the controller's; N counts the test's writes.
	Test bool
	// Note, on an entry of the test's, says what the trial did there (a
	// perturbation at a Moment) instead of a write.
	Note string
	// Controller names the controller whose reconcile made the write,
	// when its context said so (a ctrlkit controller's does); "" if not.
	Controller string
}

func (w Write) String() string {
	who := ""
	if w.Replica != "a" && w.Replica != "" {
		who = " (replica " + w.Replica + ")"
	}
	if w.Restart > 0 {
		who += fmt.Sprintf(" (after restart %d)", w.Restart)
	}
	if w.Cluster != "" {
		who = " in cluster " + w.Cluster + who
	}
	if w.Controller != "" {
		who = " by " + w.Controller + who
	}
	if w.External {
		who = " (external)" + who
	}
	if w.Note != "" {
		return fmt.Sprintf("trial: %s (+%s)", w.Note, w.At.Round(time.Millisecond))
	}
	if w.Test {
		return fmt.Sprintf("test: %s %s%s -> %d (+%s)", w.Method, w.Path, who, w.Status, w.At.Round(time.Millisecond))
	}
	clock := ""
	if w.Ahead > 0 {
		clock = ", clock ahead " + w.Ahead.Round(time.Millisecond).String()
	}
	fault := ""
	if w.Fault != "" {
		fault = ", " + w.Fault
	}
	return fmt.Sprintf("#%d %s %s%s -> %d%s (+%s%s)", w.N, w.Method, w.Path, who, w.Status, fault, w.At.Round(time.Millisecond), clock)
}

// transport sits between one run of the controller and the API server. It
// records the controller's writes, holds back the watch streams of chosen
// resources (stale reads: the informer's cache stops moving), cuts them
// (relists), crashes the controller right after a chosen write (every
// later request fails, and crash is called: it cancels the run), and
// stalls it right before a chosen write (no request reaches the server
// until resume).
type transport struct {
	replica string
	restart int
	start   time.Time

	mu     sync.Mutex
	writes []Write
	runFaults
	crashed   bool
	crashNext bool // crash at the next write, before it is sent (a Moment's)
	crash     func()
	issued    int                    // writes sent or stalled so far
	calls     int                    // external writes sent or stalled so far
	apiWrites int                    // writes to the API server sent or stalled so far
	stall     chan struct{}          // non-nil while stalled, closed by resume
	stalled   chan struct{}          // closed when the stall begins
	stopped   bool                   // shut down: no stall begins any more
	held      map[string]*span       // by resource
	streams   map[*heldBody]struct{} // open watch streams
	gone      map[string]bool        // watch -> answer its next request 410 Gone
	relisting map[string]bool        // watch -> cut, its informer has not read again since
	stirred   time.Duration          // since start: when a hold ended or a relist began reading
	// cut reports whether a cluster of Scenario.Clusters is cut off now
	// (the trial's, shared by its runs); nil: none ever is.
	cut func(cluster string) bool
	// clock is the trial's, for the writes' Ahead; nil: none.
	clock *Clock
}

func newTransport(replica string, restart int, start time.Time, rf runFaults, crash func()) *transport {
	return &transport{replica: replica, restart: restart, start: start, runFaults: rf, crash: crash,
		stalled: make(chan struct{}), held: map[string]*span{},
		streams: map[*heldBody]struct{}{}, gone: map[string]bool{}, relisting: map[string]bool{}}
}

// wrap returns a copy of cfg, the configuration of cluster ("" for
// Scenario.Config's), whose requests go through t.
func (t *transport) wrap(cfg *rest.Config, cluster string) *rest.Config {
	return wrapConfig(cfg, func(rt http.RoundTripper) http.RoundTripper { return &wrapped{t: t, next: rt, cluster: cluster} })
}

// wrapConfig returns a copy of cfg whose clients' round trippers go
// through in front.
func wrapConfig(cfg *rest.Config, in func(http.RoundTripper) http.RoundTripper) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(in)
	return cfg
}

// wrapped is t in front of one client's round tripper, to cluster.
type wrapped struct {
	t       *transport
	next    http.RoundTripper
	cluster string
}

func (w *wrapped) RoundTrip(req *http.Request) (*http.Response, error) {
	return w.t.roundTrip(w.next, req, w.cluster)
}

// WrappedRoundTripper returns the round tripper w wraps, so that
// client-go's helpers (closing idle connections) reach it.
func (w *wrapped) WrappedRoundTripper() http.RoundTripper { return w.next }

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// isRuntimes tells the requests of the runtime (leases, access reviews,
// Events) from the controller's own.
func isRuntimes(path string) bool {
	return slices.ContainsFunc(strings.Split(path, "/"), func(seg string) bool {
		return seg == "leases" || seg == "events" || strings.HasSuffix(seg, "accessreviews")
	})
}

// collectionOf names the collection req reads, with its selectors: a
// watch and the LIST an informer makes after it is cut name the same.
func collectionOf(req *http.Request) string {
	q := req.URL.Query()
	return strings.TrimRight(req.URL.Path, "/") + "?" + q.Get("labelSelector") + "&" + q.Get("fieldSelector")
}

func (t *transport) roundTrip(next http.RoundTripper, req *http.Request, cluster string) (*http.Response, error) {
	if cluster != "" && t.cut != nil && t.cut(cluster) {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrClusterCut)
	}
	write := isWrite(req.Method) && !isRuntimes(req.URL.Path)
	stall, n := t.admit(write, false)
	if stall != nil {
		<-stall // a paused process sees nothing, its context's end included
		if isWrite(req.Method) {
			// Its write goes out when it resumes, even if its context
			// ended meanwhile: it was already on its way.
			req = req.WithContext(context.WithoutCancel(req.Context()))
		}
	}
	if write && t.crashesBefore(req, cluster, false) {
		return nil, ErrCrashed
	}
	coll, watch := collectionOf(req), req.URL.Query().Get("watch") == "true"
	t.mu.Lock()
	crashed, gone := t.crashed, watch && t.gone[coll]
	if gone {
		delete(t.gone, coll)
	}
	t.mu.Unlock()
	switch {
	case crashed:
		return nil, ErrCrashed
	case gone:
		return expired(req), nil
	case watch:
		return t.roundTripWatch(next, req, coll, cluster)
	case write && n == t.errAt:
		return t.injectError(next, req, cluster)
	}
	resp, err := next.RoundTrip(req)
	if write {
		t.recordWrite(req, resp, cluster, false, "")
	} else if req.Method == http.MethodGet {
		t.read(coll, resp)
	}
	return resp, err
}

// admit counts a request that is one of the controller's writes (to the
// API server, or external: to the application it manages), starts the
// stall at the stallAt-th write, and returns the channel the request must
// wait on (nil when t is not stalled) and, for a write, its number among
// the writes of its kind (the API server's, or the external ones).
func (t *transport) admit(write, external bool) (stall <-chan struct{}, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if write {
		t.issued++
		if t.issued == t.stallAt && !t.stopped {
			t.stall = make(chan struct{})
			close(t.stalled)
		}
		if external {
			t.calls++
			n = t.calls
		} else {
			t.apiWrites++
			n = t.apiWrites
		}
	}
	return t.stall, n
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

// shutdown ends every perturbation of t for good (the run is stopping):
// no stall begins any more, a stall under way and every hold end.
func (t *transport) shutdown() {
	t.mu.Lock()
	t.stopped = true
	held := make([]string, 0, len(t.held))
	for r := range t.held {
		held = append(held, r)
	}
	t.relisting = map[string]bool{}
	t.mu.Unlock()
	t.resume()
	for _, r := range held {
		t.release(r)
	}
}

// read notes a read of the collection coll: the first that succeeds after
// a cut ends the relist (the informer reads again).
func (t *transport) read(coll string, resp *http.Response) {
	if resp == nil || resp.StatusCode >= 300 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.relisting[coll] {
		delete(t.relisting, coll)
		t.stirred = time.Since(t.start)
	}
}

// settling reports whether a perturbation is still under way: a hold not
// released, a relist whose informer has not read again, or a stall; and
// since when (from start) the last one has been over.
func (t *transport) settling() (busy bool, since time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held) > 0 || len(t.relisting) > 0 || t.stall != nil, t.stirred
}

// roundTripWatch opens a watch stream t can hold back and cut.
func (t *transport) roundTripWatch(next http.RoundTripper, req *http.Request, watch, cluster string) (*http.Response, error) {
	ctx, cut := context.WithCancel(req.Context())
	resp, err := next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cut()
		return resp, err
	}
	t.read(watch, resp)
	b := &heldBody{ReadCloser: resp.Body, t: t, resource: resourceOf(req.URL.Path), watch: watch, cluster: cluster, ctx: ctx, cancel: cut,
		frames: newFrames(resp.Header.Get("Content-Type"))}
	t.mu.Lock()
	t.streams[b] = struct{}{}
	t.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// expired is the answer to a watch the server can no longer serve from
// the client's resource version (its history was compacted): 410 Gone.
func expired(req *http.Request) *http.Response {
	return status(req, http.StatusGone, "Expired", "perturb: too old resource version (history compacted)")
}

func (t *transport) recordWrite(req *http.Request, resp *http.Response, cluster string, external bool, fault string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := Write{Cluster: cluster, Replica: t.replica, Restart: t.restart, N: len(t.writes) + 1, Method: req.Method, Path: req.URL.Path,
		At: time.Since(t.start), External: external, Fault: fault, Controller: tracing.ControllerFrom(req.Context())}
	if external {
		w.Path = req.URL.Host + req.URL.Path
	}
	if t.clock != nil {
		w.Ahead = t.clock.Ahead()
	}
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

// span is a hold of a resource's watch streams: the events whose resource
// version is above after are not delivered until c is closed.
type span struct {
	c     chan struct{}
	after uint64
}

// hold stops delivering watch events of resource (e.g. "configmaps") until
// release.
func (t *transport) hold(resource string) { t.holdAfter(resource, 0) }

// holdAfter stops delivering the watch events of resource whose resource
// version is above rv until release: what the controller had been given
// up to rv still reaches it (an event of a stream whose encoding the
// transport does not know is held whatever its version).
func (t *transport) holdAfter(resource string, rv uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.held[resource]; !ok && !t.stopped {
		t.held[resource] = &span{c: make(chan struct{}), after: rv}
	}
}

func (t *transport) release(resource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.held[resource]; ok {
		close(s.c)
		delete(t.held, resource)
		t.stirred = time.Since(t.start)
	}
}

// relist makes the informers of resource list again, as after a
// compaction: each of its open watch streams ends (what it had not
// delivered is lost), and the next request of each of those watches is
// answered 410 Gone. It also releases a hold of resource.
func (t *transport) relist(resource string) {
	t.mu.Lock()
	var cut []*heldBody
	for b := range t.streams {
		if b.resource == resource && !t.stopped {
			cut = append(cut, b)
			t.gone[b.watch], t.relisting[b.watch] = true, true
		}
	}
	t.mu.Unlock()
	for _, b := range cut {
		b.cutOff()
	}
	t.release(resource)
}

// cutStreams ends every open watch stream to cluster, as a network
// partition does (its informers' next requests fail while it is cut).
func (t *transport) cutStreams(cluster string) {
	t.mu.Lock()
	var cut []*heldBody
	for b := range t.streams {
		if b.cluster == cluster {
			cut = append(cut, b)
		}
	}
	t.mu.Unlock()
	for _, b := range cut {
		b.cutOff()
	}
}

// gate returns a channel closed when an event of resource at version rv
// is no longer held, and whether the wait is a stall (which the stream's
// context does not end); nil when the stream may go on.
func (t *transport) gate(resource string, rv uint64) (<-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stall != nil {
		return t.stall, true
	}
	if s := t.held[resource]; s != nil && rv > s.after {
		return s.c, false
	}
	return nil, false
}

// resourceOf returns the resource of a collection's path: "configmaps" in
// /api/v1/namespaces/ns/configmaps and /apis/apps/v1/deployments.
func resourceOf(path string) string {
	path = strings.TrimRight(path, "/")
	return path[strings.LastIndexByte(path, '/')+1:]
}

// heldBody is a watch stream that blocks while its resource is held or
// its transport stalled, and ends (io.EOF, as a connection the server
// closed) once cut off.
type heldBody struct {
	io.ReadCloser
	t        *transport
	resource string
	watch    string
	cluster  string
	ctx      context.Context
	cancel   context.CancelFunc // aborts the request
	cut      atomic.Bool
	frames   *frames // nil: an encoding not known, held byte by byte
	ready    []byte  // an event let through, not yet read
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.frames != nil {
		return b.readEvents(p)
	}
	b.wait(math.MaxUint64)
	if b.cut.Load() {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	b.wait(math.MaxUint64) // what arrived once the hold began is held too
	if b.cut.Load() {      // what arrived as it was cut is lost with it
		return 0, io.EOF
	}
	return n, err
}

// readEvents reads a stream split into events: each is delivered once no
// hold stops it (by its resource version).
func (b *heldBody) readEvents(p []byte) (int, error) {
	for len(b.ready) == 0 {
		if b.cut.Load() {
			return 0, io.EOF
		}
		ev, rv, err := b.frames.next(b.ReadCloser)
		if err != nil {
			return 0, err
		}
		b.wait(rv)
		if b.cut.Load() { // what arrived as it was cut is lost with it
			return 0, io.EOF
		}
		b.ready = ev
	}
	n := copy(p, b.ready)
	b.ready = b.ready[n:]
	return n, nil
}

// wait blocks while an event at version rv of the stream's resource is
// held (until its context ends) or its transport stalled.
func (b *heldBody) wait(rv uint64) {
	for g, stall := b.t.gate(b.resource, rv); g != nil; g, stall = b.t.gate(b.resource, rv) {
		if stall {
			<-g
			continue
		}
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
