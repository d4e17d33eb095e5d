// Package manager is ctrlkit's runtime: it runs any number of controllers in
// one process over shared informers, with one Prometheus registry, one
// logger and one HTTP listener, and one lifecycle.
//
//	m, _ := manager.New(cfg, manager.Options{})                  // starts nothing
//	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{}) // one per type and scope, shared
//	manager.NewController(m, "name", rec, manager.ControllerOptions{}, manager.For(cms))
//	m.Run(ctx)                                                     // until ctx ends
//
// Run binds the listener (/metrics, /healthz, /readyz, the live page of the
// pipeline /debug/ctrlkit (package debug); pprof if asked),
// checks that the API server answers, logs each missing RBAC permission,
// starts the informers, then each controller, whose workers start once its
// own caches synced. /readyz answers 200 once every informer and controller
// has synced and while the API server answers, else 503 with one line per
// cause (a 403 with its verb, a kind the server does not serve, an API
// server silent for Options.UnreachableBound). The API server counts as
// silent once no probe of its /livez (made when /readyz is asked, at most
// once a second, and every second while probes fail) has got an answer for
// the bound, 15s by default, or an informer's lists and watches have failed
// for that long: a replica that cannot reach its API server gets no
// webhook calls from a Service. It is ready again once a probe is answered
// and each informer has listed or watched again (within its backoff, at
// most 30s). A standby (leader election) with synced caches is ready.
// /healthz does not fail for it: a restart would not bring the API server
// back. When ctx ends, controllers stop
// taking keys and in-flight reconciles finish within ShutdownTimeout (then
// are cancelled), then the informers and the listener stop; Run returns once
// every goroutine has exited.
//
// Controllers also come and go while Run runs: NewController starts one at
// once (its new informers with it; the replica stays ready while it
// syncs), RemoveController stops one and takes its handlers, queue,
// goroutines, metrics and debug entries away. Informers are counted: each
// Informer call and each controller's source holds one reference;
// ReleaseInformer and RemoveController give them back, and the last stops
// the informer.
//
// /debug/ctrlkit's data and pprof answer, with Options.DebugToken set, the
// clients that send it (loopback ones too); without one, loopback clients
// whose Host header is a loopback name or address and that no proxy relayed
// (debug.Guard). Run refuses to start on a listener beyond loopback
// without a token while either is served, with ErrDebugExposed. The
// listener's servers bound header size, body size, writes and idle
// connections (Options.HTTPIdleTimeout).
//
// # Metrics
//
// The registry (Options.Registry, served on /metrics) holds the Go runtime
// and process collectors, every stage's series, and, under
// controller-runtime's names and labels so that its dashboards and alerts
// carry over: controller_runtime_reconcile_total{controller,result},
// controller_runtime_reconcile_errors_total,
// controller_runtime_terminal_reconcile_errors_total,
// controller_runtime_reconcile_panics_total,
// controller_runtime_reconcile_timeouts_total,
// controller_runtime_reconcile_time_seconds,
// controller_runtime_active_workers and
// controller_runtime_max_concurrent_reconciles (package controller), the
// workqueue_* series labelled controller and name (package workqueue), and
// client-go's REST client series rest_client_requests_total{code,method,host},
// rest_client_request_duration_seconds{verb,host} and
// rest_client_rate_limiter_duration_seconds{verb,host}.
//
// # client-go's metrics and logs
//
// client-go reports requests to hooks it accepts once per process, and does
// not say which client made a request, and reads them unsynchronised, so
// this package sets them when it is initialised (before any goroutine runs);
// the REST client series they feed are process-wide and registered in every
// manager's registry, so each manager's /metrics counts the requests of the
// whole process, as in controller-runtime, whose series are global too. If
// another library set the hooks first (importing controller-runtime's
// metrics package before this one is initialised does), New logs a warning and registers no rest_client_*
// series: they would stay at 0.
//
// klog, client-go's logger (leader election, API deprecation warnings,
// ...), is also configured once per process: the first New without
// Options.KeepKlogOutput points it at a router, which hands each line to the
// Logger of the most recently started manager still running, and to
// slog.Default() while none is. A manager's Logger receives no line after
// its Run returned (a test's logger may be used after Run, never after the
// test). klog's logger cannot be replaced safely while other goroutines log
// through it, so create the first manager before starting anything else
// that uses client-go. A program that set klog's logger itself, and wants
// to keep it, sets KeepKlogOutput on every manager.
//
// Reconcilers receive an object.ObjectName and read the typed, read-only
// store.Reader of the informers they were given; they write through the
// typed client of any type in the scheme (Client[T], package client),
// client-go's clientsets (Manager.Kube) and the helpers of package apply.
// Writes made with a reconcile's context through any of them are recorded
// for read-your-writes.
//
// Concurrency: every method of Manager is safe for concurrent use;
// informers and controllers may be added before Run or while it runs (see
// NewController, RemoveController, ReleaseInformer and WhenServed).
package manager
