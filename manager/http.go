package manager

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctrlkit/ctrlkit/debug"
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

// AddReadyCheck adds a check to /readyz beside the built-in one (every
// controller's caches synced). Call it before Run.
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
		for _, st := range m.factory.Statuses() {
			fmt.Fprintf(w, "informer %s: synced, started %s\n", st.Name, st.Start)
		}
	}
}

// notReady explains, one line each, the informers that have not synced and
// the controllers that wait for them. Ready means: every controller's
// caches have synced and its workers run.
func (m *Manager) notReady() []string {
	m.mu.Lock()
	running := m.once.Started()
	ctrls := append([]controllerEntry(nil), m.controllers...)
	m.mu.Unlock()
	if !running {
		return []string{"manager: not started"}
	}
	var out []string
	for _, st := range m.factory.Statuses() {
		switch {
		case st.Synced:
		case st.Err != nil:
			out = append(out, st.Err.Error()) // "informer: cache of NAME did not sync: why"
		case !st.Start.Decided:
			out = append(out, fmt.Sprintf("informer %s: not synced yet, start %s", st.Name, st.Start))
		default:
			out = append(out, fmt.Sprintf("informer %s: not synced yet", st.Name))
		}
	}
	for _, e := range ctrls {
		if !e.c.HasSynced() {
			out = append(out, fmt.Sprintf("controller %s: waiting for its caches", e.c.Name()))
		}
	}
	return out // a standby whose caches synced is ready: it can take over at once
}
