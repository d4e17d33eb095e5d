// Package perturb tests a controller the way research tools find
// controllers' bugs (Sieve, Acto): it runs the controller as it ships
// against a real API server, drives a workload, and perturbs the run, from
// a seed: watch streams held back so reconciles read a stale cache, and the
// controller stopped right after each of its writes and started again.
// Oracles: invariants the user states over the cluster's state, checked
// throughout; the controller settling; and a fresh controller, started on
// the settled state, changing nothing (the state is the one a fresh
// controller computes from a fresh LIST). A failure prints the seed, the
// perturbation and the controller's writes in order.
//
// Check runs the trials of a Scenario one after another, each in a fresh
// namespace: one unperturbed (it must pass, and counts the writes), then
// Faults.StaleTrials with stale reads, then one per write with a crash
// after it. The controller under test talks to the API server through a
// transport of the package (Env.Config), which records its writes (not
// leases' or access reviews'), holds back watch streams and fails every
// request after a crash.
//
// The controller runs in the test's process, beside the workload: give its
// manager KeepKlogOutput (klog's logger is process-wide, and routing it
// while other goroutines make requests is a data race).
//
// Time is real: the API server's, the controller's and the workload's. A
// seed replays the same perturbations, not the same interleaving, so a
// race may take a few runs to show again.
package perturb
