// Package perturb tests a controller the way research tools find
// controllers' bugs (Sieve, Acto): it runs the controller as it ships
// against a real API server, drives a workload, and perturbs the run, from
// a seed. Oracles: invariants the user states over the cluster's state,
// checked throughout; the controller settling; and a fresh controller,
// started on the settled state, changing nothing (the state is the one a
// fresh controller computes from a fresh LIST). A failure prints the seed,
// the perturbation and the controller's writes in order.
//
// Check runs the trials of a Scenario one after another, each in a fresh
// namespace: one unperturbed (it must pass, and counts the writes), then
// the perturbed ones (Faults):
//
//   - stale reads: a resource's watch streams held back for spans drawn
//     from the seed, so the controller reconciles from an old cache, and
//     its events from different informers arrive out of their order;
//   - relists: such spans ended by cutting the watch and answering the
//     next one 410 Gone, as after a compaction: the informer lists again,
//     and the span's events arrive coalesced (an object deleted and
//     created again as changed, a deletion as a tombstone);
//   - failover: two replicas electing a leader; the leader paused right
//     before one of its writes until the other leads, then resumed, its
//     write landing late;
//   - a crash right after each write of the controller, and a restart;
//   - an error given to a write of the controller's instead of the
//     server's answer (Faults.APIErrors): 409, 429, 500, a timeout before
//     the server saw it, or a timeout after it applied it;
//   - at a moment the user names (Faults.Moments: a state of the cluster,
//     as a watch shows it, e.g. "an owner's Secret exists"), at each time
//     it comes: chosen resources held back (stale reads) or held and
//     relisted from there, or a crash before the controller's next write
//     (between what it read and the write it decided). Timed spans find a
//     state-dependent bug only when a span happens to cover the state;
//     a moment finds it whenever the workload reaches the state;
//   - for a controller over a fleet of clusters (Scenario.Clusters), one
//     cluster cut off, as a server that is down or partitioned away,
//     until the others have settled: they must, while it is cut; then it
//     comes back and must catch up;
//   - for a controller that calls the application it manages (a cloud
//     API behind a finalizer) through Env.External, each of those writes
//     in turn dropped (it times out before it reaches the application)
//     or answered and the answer lost (it times out all the same): the
//     controller cannot tell which, and must be right in both.
//
// The controller under test talks to the API server through a transport
// of the package (Env.Config), and to its application through
// Env.External, which records its writes (not Leases', access reviews' or
// Events'), holds back, cuts and refuses watch streams,
// pauses every request of a stalled replica and fails every request after
// a crash. A replica whose Run returns is started again, as its Pod would
// be. A trial ends once every perturbation is over, Settled holds and the
// controller has been quiet (no write) for Scenario.Quiet; then a fresh
// controller runs on the settled state (once it leads, with leader
// election) and must make no write that succeeds (a write the server
// finds changes nothing, an apply of the same fields, counts too: apply
// only what differs). A controller that stops short of Settled (no write
// for Scenario.Stall, a quarter of Timeout by default, once the workload and
// the perturbations are over) fails the trial as stuck, with Settled's
// error, instead of waiting out Timeout. A passing trial's
// namespace is deleted, a failing one's kept and named in the failure,
// whose list of writes has the test's own (the workload's, through
// Env.Kube; "test:") and what the trial did at a moment ("trial:") in
// their places among the controller's, each of those naming the
// controller that made it (a ctrlkit controller's reconcile context
// carries its name). A
// crash or failover trial whose controller makes fewer writes than the
// unperturbed one never reaches its write: Result.Ran says so.
//
// The controller runs in the test's process, beside the workload: give its
// manager KeepKlogOutput (klog's logger is process-wide, and routing it
// while other goroutines make requests is a data race). klog then writes
// to stderr, and a crash trial's cancelled requests make client-go log
// lines such as "Unexpected error when reading response body" there; a
// test package that wants them gone sets klog's logger once, before any
// request, in its TestMain: klog.SetLogger(logr.Discard()).
//
// Late writes. A failover trial's paused leader resumes with a write
// already on its way: no lease, fence or context stops a request the
// server has not yet received, in production either. The new leader may
// have acted meanwhile, so for a while the state holds both. Choose what
// an invariant requires accordingly: a property the late write can break
// only for a moment (two children until the next reconcile removes one)
// is an Eventually invariant, checked once the controller settled; one
// that must never break (no two Jobs running, no external resource
// created twice) needs writes the server refuses when late: a create
// under a name derived from the owner (a second create fails with
// AlreadyExists), an update carrying the resource version it was computed
// from (a conflict), or a delete with a UID precondition. A trial that
// fails an always-invariant by a late write is reporting a real race, not
// a harness artefact.
//
// Leader election in trials: give the manager the Env's lease timings
// (Env.LeaseDuration, RenewDeadline, RetryPeriod) so a takeover takes
// seconds.
//
// Time. Each trial has a Clock (Env.Clock) that runs with real time and
// jumps ahead when the workload advances it: Clock.Advance(ctx, 3*time.Hour)
// takes the controller through three hours in a second or so, jumping to
// each timer of its queue in turn (RequeueAfter, retry delays) once the
// controller is quiet, never while it is being restarted. Give the clock to
// the controller's queues (controller.Options.Clock) and take the
// controller's own time from it (Clock.Now where it would call time.Now):
// a schedule, an expiry or a rotation is then tested in seconds, crashes
// and restarts included (the clock is the trial's, not the run's), and a
// failure's writes say how far the clock was ahead (Write.Ahead). The API
// server's time stays real. The clock runs on after the workload's last
// Advance, so a recurring schedule (every minute, a cron) keeps doing work
// through Settled, the quiet period and the fresh controller's check: end
// the workload with the schedule stopped (suspended, or its object
// deleted), or write Settled and the invariants to allow the runs that
// come after. A seed replays the same perturbations
// (Result.Ran names them), not the same interleaving, so a race may take a
// few runs to show again.
//
// Cost, measured on a 2-core machine with the package's tests: a crash
// trial takes about 2 seconds, a stale-read or relist trial 3 to 5, a
// failover trial about 6 on the Env's lease timings (the takeover waits out
// the 2-second lease), a trial at a moment about 3, an external-call or
// API-error trial 2 to 4 (a 429 waits out its Retry-After).
package perturb
