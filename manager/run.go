package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/object"
)

// Run runs everything until ctx ends: it binds the HTTP listener, checks
// that the API server answers, starts the informers (and, beside them,
// the check of which permissions are missing), then each controller (whose workers start once its own
// caches synced, independently of the others) and the runnables. A
// failure to start is returned at once with nothing left running.
//
// When ctx ends, controllers stop taking keys and let in-flight reconciles
// finish (see Options.ShutdownTimeout), runnables stop, then the informers
// and the listener. Run returns after every goroutine it started has
// exited: nil after a clean shutdown, else the first error. It can be
// called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if err := m.once.Start("manager"); err != nil {
		m.mu.Unlock()
		return err
	}
	ctrls, runnables := slices.Clone(m.controllers), slices.Clone(m.runnables)
	errs := errors.Join(append(slices.Clone(m.errs), m.checkDebug())...)
	m.mu.Unlock()
	defer m.stop()
	defer context.AfterFunc(ctx, m.stop)()
	if !m.opts.KeepKlogOutput {
		defer joinKlogRoute(m.opts.Logger)()
	}
	defer m.closeConnections()
	if errs != nil {
		close(m.listening)
		return errs
	}

	servers, err := m.listen()
	close(m.listening)
	if err != nil {
		return err
	}
	if err := m.preflight(ctx); err != nil {
		for _, s := range servers {
			s.ln.Close()
		}
		return err
	}
	m.mu.Lock()
	fleets := len(m.fleets)
	m.mu.Unlock()
	addr := m.Addr(ctx)
	if addr == "" {
		addr = "off" // HTTPAddr "0": not ":0", which would be an address
	}
	m.opts.Logger.Info("manager: starting", "controllers", len(ctrls), "fleets", fleets, "http", addr)
	m.planSharding(ctrls)
	err = runStages(ctx, []stage{
		{"http", append(serving(servers, m.opts.Logger), m.api.run, m.checkPermissions)},
		{"caches", []func(context.Context) error{m.factory.Run}},
		{"events", []func(context.Context) error{m.recorder.started(ctx)}},
		{"work", m.work(ctrls, runnables)},
	})
	if err != nil {
		m.opts.Logger.Error("manager: stopped with an error", "err", err)
		return err
	}
	m.opts.Logger.Info("manager: stopped")
	return nil
}

// stage is a group of runnables the manager starts together.
type stage struct {
	name string
	runs []func(context.Context) error
}

// runStages starts the stages in order, each under a context of its own,
// and runs them until ctx ends or a runnable fails; then it stops them in
// reverse order, each after the one started after it has returned, so
// work stops before the caches it reads and the caches before the
// listener that reports on them. It returns the first error.
func runStages(ctx context.Context, stages []stage) error {
	stop, stopAll := context.WithCancelCause(ctx)
	defer stopAll(nil)
	var (
		mu    sync.Mutex
		first error
	)
	type running struct {
		cancel context.CancelCauseFunc
		wg     sync.WaitGroup
	}
	rs := make([]*running, len(stages))
	for i, st := range stages {
		sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		r := &running{cancel: cancel}
		rs[i] = r
		for _, run := range st.runs {
			r.wg.Go(func() {
				if err := run(sctx); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					stopAll(err)
				}
			})
		}
	}
	<-stop.Done()
	cause := context.Cause(stop) // ctx's cause (e.g. controller.ErrStopNow), or the first error
	for _, r := range slices.Backward(rs) {
		r.cancel(cause)
		r.wg.Wait()
	}
	return first
}

// serving returns a runnable per HTTP server: it serves until its context
// ends, then shuts the server down (in-flight requests get 5s). A server
// that fails is logged; the manager goes on without it.
func serving(servers []server, log *slog.Logger) []func(context.Context) error {
	var runs []func(context.Context) error
	for _, s := range servers {
		runs = append(runs, func(ctx context.Context) error {
			served := make(chan error, 1)
			go func() { served <- s.srv.Serve(s.ln) }()
			select {
			case err := <-served:
				log.Error("manager: HTTP server stopped", "addr", s.ln.Addr().String(), "err", err)
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = s.srv.Shutdown(sctx)
				<-served
			}
			return nil
		})
	}
	return runs
}

// work returns the runnables of the work stage: the controllers and
// runnables, with leader election those that need the lease only while
// this replica holds it (through the elector; the others, and the
// informers, run on every replica: a warm standby), and the sharder.
func (m *Manager) work(ctrls []controllerEntry, runnables []Runnable) []func(context.Context) error {
	for _, c := range ctrls {
		m.starterFor(c).add(c)
	}
	every, leaderOnly := []func(context.Context) error{m.everyStarter.run}, []func(context.Context) error{m.leaderStarter.run}
	for _, r := range runnables {
		if n, ok := r.(LeaderElectionRunnable); m.elector != nil && (!ok || n.NeedLeaderElection()) {
			leaderOnly = append(leaderOnly, r.Run)
			continue
		}
		every = append(every, r.Run)
	}
	if m.elector != nil {
		every = append(every, func(ctx context.Context) error { return m.elector.Run(ctx, fenced(leaderOnly)) })
	}
	if m.sharder != nil {
		every = append(every, m.sharder.Run)
	}
	return every
}

// stop refuses controllers from now on: Run is ending.
func (m *Manager) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopping = true
}

// fenced runs fns together while this replica leads. When the lease is
// lost, their context ends with controller.ErrStopNow (and election.ErrLost):
// controllers cancel in-flight reconciles at once instead of letting them
// finish, since another replica is about to take over.
func fenced(fns []func(context.Context) error) func(context.Context) error {
	return func(lead context.Context) error {
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(lead))
		stop := context.AfterFunc(lead, func() {
			cause := context.Cause(lead)
			if errors.Is(cause, election.ErrLost) {
				cause = fmt.Errorf("%w: %w", controller.ErrStopNow, cause)
			}
			cancel(cause)
		})
		defer stop()
		defer cancel(nil)
		g, gctx := errgroup.WithContext(ctx)
		for _, fn := range fns {
			g.Go(func() error { return fn(gctx) })
		}
		return g.Wait()
	}
}

// closeConnections closes the manager's idle HTTP connections, so their
// goroutines end with Run. A watch stream whose context was cancelled is
// torn down asynchronously by the HTTP/2 transport, and its connection
// becomes idle a moment later: close a few times over 100ms.
func (m *Manager) closeConnections() {
	for i := range 3 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		utilnet.CloseIdleConnectionsFor(m.http.Transport)
	}
}

// server is one bound HTTP listener and what it serves.
type server struct {
	srv *http.Server
	ln  net.Listener
}

// listen binds the HTTP listeners: none when HTTPAddr is "0", a second one
// for the probes with HealthAddr. On failure nothing stays bound.
func (m *Manager) listen() ([]server, error) {
	var out []server
	bind := func(addr, option string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return fmt.Errorf("manager: HTTP listener (Options.%s): %w", option, err)
		}
		out = append(out, server{srv: m.newServer(h), ln: ln})
		return nil
	}
	if m.opts.HTTPAddr != "0" {
		if err := bind(m.opts.HTTPAddr, "HTTPAddr", m.handler(m.opts.HealthAddr == "")); err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.addr = out[0].ln.Addr().String()
		m.mu.Unlock()
	}
	if m.opts.HealthAddr != "" {
		if err := bind(m.opts.HealthAddr, "HealthAddr", m.probes(http.NewServeMux())); err != nil {
			return nil, err
		}
	}
	if m.opts.MetricsAddr != "" {
		tlsCfg, err := selfSignedTLS()
		if err == nil {
			mux := http.NewServeMux()
			mux.Handle("/metrics", newMetricsAuth(m.kube, promhttp.HandlerFor(m.opts.Registry, promhttp.HandlerOpts{Registry: m.opts.Registry}), m.opts.Logger))
			err = bind(m.opts.MetricsAddr, "MetricsAddr", mux)
		}
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return nil, err
		}
		last := &out[len(out)-1]
		m.mu.Lock()
		m.metricsAddr = last.ln.Addr().String()
		m.mu.Unlock()
		last.ln = tls.NewListener(last.ln, tlsCfg)
	}
	if len(m.webhooks.Paths()) > 0 {
		srv, err := m.bindWebhooks()
		if err != nil {
			for _, s := range out {
				s.ln.Close()
			}
			return nil, err
		}
		out = append(out, srv)
	}
	return out, nil
}

// bindWebhooks binds the webhook server's HTTPS listener. Its server is
// the webhook package's (webhook.Server.HTTPServer), with the limits of
// Options.Webhook.Limits rather than the manager's: a review holds up to
// two objects of the API server's largest size, and the webhook server
// bounds the reviews and bytes in flight itself.
func (m *Manager) bindWebhooks() (server, error) {
	// A certificate kept in a Secret (WebhookCerts) comes once the manager
	// runs: /readyz waits for it instead.
	if err := m.webhooks.Ready(); err != nil && m.opts.WebhookCerts.Secret == (object.ObjectName{}) {
		return server{}, fmt.Errorf("manager: webhooks %v are registered: %w", m.webhooks.Paths(), err)
	}
	ln, err := net.Listen("tcp", m.webhooks.Options().Addr)
	if err != nil {
		return server{}, fmt.Errorf("manager: webhook listener (Options.Webhook.Addr): %w", err)
	}
	m.mu.Lock()
	m.webhookAddr = ln.Addr().String()
	m.checks = append(m.checks, check{name: "webhook", ready: true, fn: func(*http.Request) error { return m.webhooks.Ready() }})
	m.mu.Unlock()
	srv := m.webhooks.HTTPServer()
	return server{srv: srv, ln: tls.NewListener(ln, srv.TLSConfig)}, nil
}
