// Package chaos holds TestChaos, ctrlkit's end-to-end convergence test under
// faults; it has no code of its own.
//
// An informer with three handlers (slow, panicking on 1% of events, plain) and
// a controller whose reconciler fails 5% of the time run against the real API
// server, through a fault proxy, while eight writers make random creates,
// updates and deletes directly on the server and a seeded fault schedule
// restarts the server, compacts etcd, and cuts and stalls the proxy. At the
// end every handler's view must equal a fresh LIST, the reconciler must have
// seen the latest resource version of every live object, every deleted object
// must have been seen deleted, and no goroutine may be left.
//
// make test runs its short form (at least 20,000 operations, about three
// minutes under -race on two cores); make chaos runs it for CHAOS_DURATION:
//
//	go test -race -run '^TestChaos$' ./internal/chaos/ -chaos.duration=10m -chaos.seed=N
//
// The seed fixes every random choice (operations, faults and their order,
// panics, reconcile failures), not their timing, so a rerun with the same
// seed is the same workload, not the same interleaving.
package chaos
