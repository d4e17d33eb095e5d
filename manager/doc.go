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
// has synced, else 503 with one line per laggard saying why (a 403 with its
// verb, a kind the server does not serve). When ctx ends, controllers stop
// taking keys and in-flight reconciles finish within ShutdownTimeout (then
// are cancelled), then the informers and the listener stop; Run returns once
// every goroutine has exited.
//
// /debug/ctrlkit's data and pprof answer loopback clients whose Host header
// is a loopback name or address (debug.Guard), and others only with
// Options.DebugToken; Run refuses to start on a listener beyond loopback
// without a token while either is served, with ErrDebugExposed. The
// listener's servers bound header size, body size, writes and idle
// connections (Options.HTTPIdleTimeout).
//
// Reconcilers receive an object.ObjectName and read the typed, read-only
// store.Reader of the informers they were given; they write through the
// typed client of any type in the scheme (Client[T], package client),
// client-go's clientsets (Manager.Kube) and the helpers of package apply.
// Writes made with a reconcile's context through any of them are recorded
// for read-your-writes.
//
// Concurrency: every method of Manager is safe for concurrent use; build
// informers and controllers before Run (informers may also be added while it
// runs).
package manager
