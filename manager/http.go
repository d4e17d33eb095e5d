package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// check is a named health or readiness check.
type check struct {
	name  string
	ready bool // a readiness check, else a health check
	fn    func(*http.Request) error
}

// AddHealthCheck adds a check to /healthz: the process is unhealthy (and a
// kubelet restarts it) while fn fails. Call it before Run.
func (m *Manager) AddHealthCheck(name string, fn func(*http.Request) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks = append(m.checks, check{name: name, fn: fn})
}

// AddReadyCheck adds a check to /readyz beside the built-in ones (every
// controller's caches synced, the API server answering: see
// Options.UnreachableBound). Call it before Run.
func (m *Manager) AddReadyCheck(name string, fn func(*http.Request) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks = append(m.checks, check{name: name, ready: true, fn: fn})
}

// The limits of the manager's HTTP servers. WriteTimeout leaves pprof's
// profile and trace working: they extend their own write deadline by the
// seconds asked for. There is no server-wide ReadTimeout: it would cancel
// a profile's context when it expires; a request with a body gets a read
// deadline of its own instead (see limited).
const (
	readHeaderTimeout  = 10 * time.Second
	bodyReadTimeout    = 30 * time.Second
	writeTimeout       = 30 * time.Second
	defaultIdleTimeout = 90 * time.Second
	maxHeaderBytes     = 64 << 10
	maxBodyBytes       = 1 << 20
)

// newServer returns the server of one of the manager's listeners, with
// the timeouts and size limits above.
func (m *Manager) newServer(h http.Handler) *http.Server {
	idle := m.opts.HTTPIdleTimeout
	if idle <= 0 {
		idle = defaultIdleTimeout
	}
	return &http.Server{Handler: limited(h), ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idle, MaxHeaderBytes: maxHeaderBytes}
}

// limited caps the body of every request at maxBodyBytes and gives a
// request that has one bodyReadTimeout to send it.
func limited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// handler serves /metrics, the probes if withProbes, /debug/ctrlkit unless
// disabled, and, if enabled, pprof, whose data (the command line, memory,
// goroutine stacks) is guarded like the debug page's.
func (m *Manager) handler(withProbes bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.opts.Registry, promhttp.HandlerOpts{Registry: m.opts.Registry}))
	if withProbes {
		m.probes(mux)
	}
	if !m.opts.DisableDebug {
		dh := m.debugHandler()
		mux.Handle(debug.Path, dh)
		mux.Handle(debug.Path+"/", dh)
	}
	if m.opts.EnablePprof {
		guard := func(h http.HandlerFunc) http.Handler { return debug.Guard(m.debugOptions(), h) }
		mux.Handle("/debug/pprof/", guard(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", guard(pprof.Cmdline))
		mux.Handle("/debug/pprof/profile", guard(pprof.Profile))
		mux.Handle("/debug/pprof/symbol", guard(pprof.Symbol))
		mux.Handle("/debug/pprof/trace", guard(pprof.Trace))
	}
	return mux
}

// debugOptions is who may read the debug data and pprof: loopback clients
// naming localhost, a loopback address or HTTPAddr's host; others with
// DebugToken.
func (m *Manager) debugOptions() debug.Options {
	o := debug.Options{Token: m.opts.DebugToken}
	if host, _, err := net.SplitHostPort(m.opts.HTTPAddr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			o.Hosts = []string{host}
		}
	}
	return o
}

// probes adds /healthz and /readyz to mux.
func (m *Manager) probes(mux *http.ServeMux) *http.ServeMux {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { m.serveChecks(w, r, false) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { m.serveChecks(w, r, true) })
	return mux
}

// serveChecks answers 200 with "ok" when every check passes, else 503 with
// one line per failing check saying why.
func (m *Manager) serveChecks(w http.ResponseWriter, r *http.Request, ready bool) {
	var failed []string
	if ready {
		failed = m.notReady()
	}
	m.mu.Lock()
	checks := append([]check(nil), m.checks...)
	m.mu.Unlock()
	for _, c := range checks {
		if c.ready != ready {
			continue
		}
		if err := c.fn(r); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.name, err))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(failed, "\n"))
		return
	}
	fmt.Fprintln(w, "ok")
	if ready && r.URL.Query().Has("verbose") {
		fmt.Fprintln(w, m.api.answered(time.Now()))
		if len(m.webhooks.Paths()) > 0 {
			if why := m.webhooks.Stats().Certificate.Err; why != "" {
				// Ready: the last good certificate still serves. Failing
				// readiness would take every replica (they mount the same
				// Secret) out of the Service at once.
				fmt.Fprintf(w, "webhook: serving the last good certificate; the new one was refused: %s\n", why)
			}
		}
		for _, st := range m.factory.Statuses() {
			fmt.Fprintf(w, "informer %s: synced, started %s\n", st.Name, st.Start)
		}
		for _, sw := range m.waitingFor() {
			fmt.Fprintf(w, "waiting for CRD %s: %s\n", sw.crd, sw.waiting())
		}
	}
}

// notReady explains, one line each, why the replica is not ready: the API
// server has not answered for the bound, informers have not synced or
// their lists and watches have failed for the bound, controllers wait for
// their caches. Ready means: every controller's caches have synced and its
// workers run, and the API server answers (see apiProbe). Informers and
// controllers added while the manager runs do not count until they synced:
// the replica that serves stays ready while one more controller starts.
func (m *Manager) notReady() []string {
	m.mu.Lock()
	running := m.once.Started()
	ctrls := append([]controllerEntry(nil), m.controllers...)
	late := map[string]bool{}
	for _, e := range m.informers {
		late[e.name] = e.late
	}
	m.mu.Unlock()
	if !running {
		return []string{"manager: not started"}
	}
	now := time.Now()
	var out []string
	if err := m.api.check(now); err != nil {
		out = append(out, err.Error())
	}
	for _, st := range m.factory.Statuses() {
		isLate, known := late[st.Name]
		switch {
		case (isLate || !known) && !st.Synced: // added while running (or being added now): the replica stays ready meanwhile
		case st.Synced:
			if why := failingInformer(st, now, m.api.bound); why != "" {
				out = append(out, why)
			}
		case st.Err != nil:
			out = append(out, st.Err.Error()) // "informer: cache of NAME did not sync: why"
		case !st.Start.Decided:
			out = append(out, fmt.Sprintf("informer %s: not synced yet, start %s", st.Name, st.Start))
		default:
			out = append(out, fmt.Sprintf("informer %s: not synced yet", st.Name))
		}
	}
	for _, e := range ctrls {
		if !e.c.HasSynced() && !e.life.late {
			out = append(out, fmt.Sprintf("controller %s: waiting for its caches", e.c.Name()))
		}
	}
	return out // a standby whose caches synced is ready: it can take over at once
}

// The probe of the API server: at most one per probeEvery, each with a
// timeout of a third of the bound, at most maxProbeTimeout.
const (
	defaultUnreachableBound = 15 * time.Second
	probeEvery              = time.Second
	maxProbeTimeout         = 5 * time.Second
)

// apiProbe tells /readyz whether the API server answers. A stopped server
// (SIGSTOP, a network that drops packets) leaves the informers' watches
// open and silent for minutes, so their errors alone find it too late.
// So a readiness check wakes run, which probes the server, and judges
// what the probes have found so far: the check never waits for the
// server. run probes when asked, at most once per probeEvery, and again
// every probeEvery while the probes fail, so that an outage is confirmed,
// and its end seen, without waiting for the next check. Without readiness
// checks, nothing is probed.
type apiProbe struct {
	probe   func(context.Context) error // one request: nil when the server answered
	bound   time.Duration
	timeout time.Duration
	wake    chan struct{} // buffer 1: a readiness check asks for a probe

	mu   sync.Mutex // guards seen
	seen reachability
}

func newAPIProbe(probe func(context.Context) error, bound time.Duration) *apiProbe {
	if bound <= 0 {
		bound = defaultUnreachableBound
	}
	return &apiProbe{probe: probe, bound: bound, timeout: min(bound/3, maxProbeTimeout), wake: make(chan struct{}, 1)}
}

// run probes the API server until ctx ends, then returns nil: when a
// readiness check asks, and every probeEvery while the last probe failed;
// never twice within probeEvery. The server counts as answering when run
// starts: Run's preflight has just checked it.
func (p *apiProbe) run(ctx context.Context) error {
	p.record(time.Now(), nil)
	failed := false
	for {
		if !failed {
			select {
			case <-ctx.Done():
				return nil
			case <-p.wake:
			}
		}
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.timeout)
		err := p.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		p.record(start, err)
		failed = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(probeEvery - time.Since(start)):
		}
	}
}

func (p *apiProbe) record(start time.Time, err error) {
	p.mu.Lock()
	p.seen.record(start, err)
	p.mu.Unlock()
}

// check asks for a probe and returns why the API server counts as
// unreachable at now, or nil. It does not block; safe for concurrent use.
func (p *apiProbe) check(now time.Time) error {
	select {
	case p.wake <- struct{}{}:
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.unreachable(now, p.bound)
}

// answered says, for /readyz?verbose, when the last probe that got an
// answer started. Probes run when /readyz is asked, so after a quiet
// spell the answer is old while the server is well: the line says what
// would make it count as unreachable, not only the age.
func (p *apiProbe) answered(now time.Time) string {
	p.mu.Lock()
	at, failing := p.seen.answered, p.seen.err != nil
	p.mu.Unlock()
	if at.IsZero() {
		return "apiserver: not probed yet"
	}
	last := "it answered the last probe"
	if failing {
		last = "the last probe failed"
	}
	return fmt.Sprintf("apiserver: answered %s ago, %s (probed when /readyz is asked; unreachable after failing probes and %s without an answer)",
		now.Sub(at).Round(time.Millisecond), last, p.bound)
}

// reachability is what the probes of the API server found, and decides
// whether the server counts as unreachable, with time as an input. A plain
// value: apiProbe guards it.
type reachability struct {
	answered time.Time // when the last probe that got an answer started
	err      error     // the last probe's failure; nil when it got an answer
}

// record adds the result of the probe that started at start.
func (r *reachability) record(start time.Time, err error) {
	r.err = err
	if err == nil {
		r.answered = start
	}
}

// unreachable says why the server counts as unreachable at now: the last
// probe failed, and no probe that started in the last bound got an
// answer. Else it returns nil: one failed probe is not an outage.
func (r *reachability) unreachable(now time.Time, bound time.Duration) error {
	if r.err == nil {
		return nil
	}
	silent := now.Sub(r.answered)
	if silent < bound {
		return nil
	}
	return fmt.Errorf("apiserver: no answer for %s (bound %s): %w", silent.Round(100*time.Millisecond), bound, r.err)
}

// failingInformer explains, at now, a synced informer whose lists and
// watches have failed, with no list that succeeded or watch that opened
// since, for bound or longer; else it returns "". Its cache is growing
// stale, whether or not the API server answers probes (a 403 after an
// RBAC change, a resource no longer served).
func failingInformer(st informer.Status, now time.Time, bound time.Duration) string {
	if st.Err == nil || st.FailingSince.IsZero() {
		return ""
	}
	failing := now.Sub(st.FailingSince)
	if failing < bound {
		return ""
	}
	cause := st.Err.Error()
	var rerr *reflector.Error
	if errors.As(st.Err, &rerr) {
		cause = rerr.Error() // "watch NAME: status: cause", without the did-not-sync wording
	}
	return fmt.Sprintf("informer %s: lists and watches failing for %s (bound %s): %s",
		st.Name, failing.Round(100*time.Millisecond), bound, cause)
}

// probeAPIServer asks the API server's /livez, on the manager's own
// connections (a stopped server's connection stays open and silent, as
// the watches see it) and past the client-side rate limit, which a busy
// controller may have used up. /livez is exempt from API Priority and
// Fairness (never queued behind the controllers' requests), readable by
// every user under the default RBAC, and, unlike the server's /readyz,
// answers while the server drains before a shutdown, when its
// connections still serve. Any answer under 500 counts: a 401 or 403
// still proves the server answers (the informers' own failures are
// judged apart). The error leaves out the request's URL.
func (m *Manager) probeAPIServer(ctx context.Context) error {
	u := m.kube.Discovery().RESTClient().Get().AbsPath("/livez").URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("GET /livez: %w", err)
	}
	resp, err := m.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("GET /livez: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode >= http.StatusInternalServerError {
		return fmt.Errorf("GET /livez: status %d", resp.StatusCode)
	}
	return nil
}
