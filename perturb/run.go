package perturb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Env is what one trial runs in: the API server's configuration and a
// namespace of its own, fresh for the trial. Kube is an unperturbed client
// for the workload and the checks (its connections are closed when Check
// returns). Config depends on who is given the Env: in Run's, it is the
// controller's, through the trial's perturbations (its writes recorded
// and crashed after); in the Env of Workload, Settled and the invariants,
// it is unperturbed, and the writes made through it are recorded as the
// test's ("test:" in a failure's writes), as Kube's are. Replica names
// the controller's process ("a", or "b" for the second replica of a
// failover trial; the same after a restart, as a Pod's name is): with
// Faults.Failovers, Run must elect a leader with Replica as its identity
// and the Lease in Namespace, on the trial's lease timings: LeaseDuration,
// RenewDeadline and RetryPeriod (manager.Options.LeaderElection.Timing),
// 2s, 1.5s and 200ms, so that a failover trial takes seconds, not a
// production lease's 15.
//
// For a typed client of any type in the controller's scheme, custom
// resources too, in the workload, the checks or the invariants:
// client.NewForConfig[T](e.Config, scheme), unperturbed, its writes
// listed with Kube's when a trial fails.
//
// Clusters, with Scenario.Clusters, are the clusters of a controller over
// a fleet, by name; the trial's Namespace exists in each. Run's go through
// the trial's perturbations (its writes to them recorded and checked, a
// cluster cut off in a Faults.ClusterCuts trial); the workload's,
// Settled's and the invariants' are Scenario.Clusters' own. Settled must
// judge the clusters in its Env's Clusters: a cluster-cut trial asks it
// about the others alone.
type Env struct {
	Config    *rest.Config
	Namespace string
	Kube      kubernetes.Interface
	Replica   string
	Clusters  map[string]*rest.Config
	// Clock is the trial's time: give it to the controller's queues
	// (controller.Options.Clock) and take the controller's own time from
	// it; the workload moves it on (Clock.Advance).
	Clock *Clock

	run *transport // the controller's run's, for External; nil outside one
	// plain is Scenario.Config, which Run's Config wraps with the
	// perturbations (Config of the test's Env records its writes).
	plain *rest.Config

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// The trial's lease timings (see Env).
const (
	trialLeaseDuration = 2 * time.Second
	trialRenewDeadline = 1500 * time.Millisecond
	trialRetryPeriod   = 200 * time.Millisecond
)

// Invariant is a property of the cluster's state that must hold at all
// times, checked on fresh reads: Check returns an error saying what is
// wrong (e.g. "owner a has 3 children"). An Eventually invariant need only
// hold once the controller has settled (e.g. "no external resource is left
// without its owner", false while a deletion is being cleaned up): it is
// checked at the end of each trial.
type Invariant struct {
	Name       string
	Check      func(ctx context.Context, env Env) error
	Eventually bool
}

// Scenario is a controller under test, its workload and what must hold.
type Scenario struct {
	// Config is the API server's (e.g. the embedded one's).
	Config *rest.Config
	// Run runs the controller under test, as it ships (its manager and
	// controllers), against env until ctx ends. Whenever it returns before
	// the trial ends (a crash, a lost lease, an error) it is called again
	// 100ms later, as a restarted process would be: it must build
	// everything anew (caches, queues). It must return once ctx ends.
	Run func(ctx context.Context, env Env) error
	// Workload changes the cluster as users do (creates owners, changes
	// them, deletes some); it runs unperturbed, with its own client, while
	// the controller runs.
	Workload func(ctx context.Context, env Env) error
	// Settled returns nil once the controller's work is done (e.g. every
	// owner has its children), from fresh reads.
	Settled func(ctx context.Context, env Env) error
	// Invariants must hold throughout every trial and at its end.
	Invariants []Invariant
	// Seed decides every perturbation; a failure prints it. The same Seed
	// plays the same perturbations again as long as the unperturbed trial
	// counts the same writes (the crash and failover trials stop at a
	// write); the API server's timing is real, so a race may need a few
	// runs to show again.
	Seed uint64
	// Faults are the perturbations tried.
	Faults Faults
	// Timeout bounds each trial. Default: 60s.
	Timeout time.Duration
	// Quiet is how long the controller must make no write, once Settled
	// holds and every perturbation is over, for a trial to end. A fresh
	// controller must then make no write that succeeds for twice Quiet
	// once it leads (or runs, without leader election), within a quarter
	// of Timeout. Default: 500ms.
	Quiet time.Duration
	// Stall is how long a trial waits, once the workload is done and every
	// perturbation over, for a controller that makes no write while
	// Settled fails: then the trial fails as stuck, naming Settled's
	// error, instead of waiting out Timeout. A controller that waits
	// longer than this between writes (a RequeueAfter schedule) needs a
	// larger Stall. Default: a quarter of Timeout.
	Stall time.Duration
	// Clusters, for a controller over a fleet of clusters, are the
	// clusters (each an API server of its own, e.g. the embedded one's)
	// by name, beside Config's (where the Leases live; it may be one of
	// them). Each trial makes its namespace in every one. Run reaches them
	// through Env.Clusters.
	Clusters map[string]*rest.Config

	kube     kubernetes.Interface            // Check's unperturbed client
	acts     *actions                        // what the test writes through kube
	clusters map[string]kubernetes.Interface // Check's unperturbed clients of Clusters
}

// Faults are the perturbations a Scenario tries.
type Faults struct {
	// StaleReads lists resources (e.g. "secrets") whose watch streams are
	// held back in spans of up to MaxHold (default 2s) chosen from the
	// seed and timed from the trial's start (each held in the run of the
	// controller that is the latest when it begins): the controller's
	// cache of them falls behind and its reconciles read an old state.
	// A trial holds three spans, the first from the trial's start (the
	// controller's first list, what it creates at once), each of the
	// others a little after the one before ends (up to MaxHold/4): all
	// within about 4.75 x MaxHold of the start. A hold delays events, not
	// lists, so a workload whose bug needs a stale read late in its run
	// (a second reconcile of an object after the controller's own write)
	// should make those changes within that window, or raise MaxHold.
	StaleReads []string
	MaxHold    time.Duration
	// StaleTrials is how many trials with stale reads run, each with its
	// own spans. Default: 3 when StaleReads is set.
	StaleTrials int
	// Relists lists resources whose watch streams are, in spans of up to
	// MaxHold chosen from the seed, held back and then cut, the next
	// request of each cut watch answered 410 Gone as after a compaction of
	// the server's history: the
	// events of the span are never delivered one by one; the informer
	// lists again and hears them coalesced (an object deleted and created
	// again shows as changed, one deleted as a tombstone). Watch streams
	// the server itself ends are resumed by the informer without loss, and
	// so are not a perturbation of their own.
	Relists []string
	// RelistTrials is how many trials with relists run. Default: 3 when
	// Relists is set.
	RelistTrials int
	// CrashAtEveryWrite runs one trial per write of an unperturbed run:
	// trial N stops the controller right after its Nth write (every later
	// request fails, its context is cancelled) and starts it again. Writes
	// are the controller's: requests that change objects, except Leases,
	// access reviews and Events.
	CrashAtEveryWrite bool
	// Failovers is how many trials run two replicas of the controller
	// (see Env.Replica) in which the leader stalls, as a paused process
	// does, right before its Nth write (N from the seed, at most the
	// unperturbed run's writes): none of its requests reaches the server,
	// and none of its watch streams delivers, until the other replica
	// holds the lease and a while more (up to MaxHold, from the seed);
	// then they all go on, that write included, even if the replica's
	// contexts ended meanwhile (a paused process's write already on its
	// way is not called back).
	Failovers int
	// ClusterCuts is how many trials cut one of Scenario.Clusters off (the
	// cluster and the moment, within MaxHold/2 of the start, from the
	// seed), as a cluster whose API server is down or partitioned away:
	// every request of the controller to it fails (ErrClusterCut) and its
	// watch streams end. The cut lasts until the workload is done and the
	// other clusters have settled (Settled, given an Env whose Clusters
	// lack the cut one): a controller whose work on the others waits for
	// the cut cluster fails the trial once Stall has passed. Then the
	// cluster comes back, and the trial goes on as any other: everything
	// settles, a fresh controller changes nothing. Needs two Clusters or
	// more.
	ClusterCuts int
	// ExternalTimeouts runs two trials per write the controller made to
	// the application it manages (through Env.External) in the
	// unperturbed run: in one, that call times out before it reaches the
	// application (dropped); in the other, the application acts on it and
	// its answer is lost (the call times out all the same). The controller
	// sees ErrExternalTimeout in both and cannot tell which: it must
	// neither take a lost answer for a failure (create twice) nor a
	// timeout for a success (remove a finalizer over a delete that never
	// happened).
	ExternalTimeouts bool
	// APIErrors is how many trials give one write of the controller to
	// the API server (which, from the seed, among the unperturbed run's)
	// an error instead of its answer, the error from the seed too: 409
	// Conflict, 429 Too Many Requests with Retry-After (client-go waits
	// and sends it again), 500, a timeout before it reaches the server
	// (ErrTimeout), or a timeout after the server applied it (its answer
	// lost: a create the controller sends again finds it there, or makes a
	// second under a generated name).
	APIErrors int
	// Moments are states of the cluster to perturb the controller at, as
	// it reads them: for each, trials at each of its occurrences in the
	// unperturbed run (so that what they find does not hang on the seed):
	// one holding the watch streams of its Stale resources for MaxHold
	// from then, one holding those of its Relist resources and then
	// cutting them, and one crashing the controller at its first write
	// after the moment, before that write is sent (a crash between what
	// it read and the write it decided). A failure's writes show where
	// the moment came.
	Moments []Moment
}

// Failure is one trial that broke an invariant or did not converge.
type Failure struct {
	Seed      uint64
	Trial     string // the perturbation, e.g. "crash after write 3"
	Namespace string // the trial's, kept for a look (a passing trial's is deleted)
	Err       error
	History   []Write       // the controller's writes in the trial, the test's (Write.Test) and what the trial did (Write.Note), in order
	After     time.Duration // how long Check had run when the trial ended
}

func (f Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "perturb: seed %d, %s: %v\nnamespace %s; writes:", f.Seed, f.Trial, f.Err, f.Namespace)
	for _, w := range f.History {
		fmt.Fprintf(&b, "\n  %s", w)
	}
	return b.String()
}

// Result is what a Scenario's trials found.
type Result struct {
	Trials   int
	Ran      []string // each trial's perturbation, in order; "(not applied: ...)" when the controller never reached it
	Failures []Failure
	Took     time.Duration
}

// Err joins the failures, nil when there is none.
func (r Result) Err() error {
	errs := make([]error, len(r.Failures))
	for i, f := range r.Failures {
		errs[i] = f
	}
	return errors.Join(errs...)
}

// Check runs every trial of s and returns what they found: first an
// unperturbed one (which must pass: it counts the writes the crash and
// failover trials stop at), then the stale-read, relist and failover
// trials, then one crash trial per write.
// In each, the controller must keep every invariant, settle, and leave a
// state that a fresh controller, started on it, changes no further.
func Check(ctx context.Context, s Scenario) Result {
	s = s.withDefaults()
	began := time.Now()
	var res Result
	err := s.validate()
	var hc *http.Client
	s.acts = &actions{}
	if err == nil {
		hc, err = rest.HTTPClientFor(s.acts.wrap(s.Config))
	}
	if err == nil {
		defer utilnet.CloseIdleConnectionsFor(hc.Transport)
		s.kube, err = kubernetes.NewForConfigAndClient(s.Config, hc)
	}
	if err == nil && len(s.Clusters) > 0 {
		s.clusters = map[string]kubernetes.Interface{}
		for name, cfg := range s.Clusters {
			chc, cerr := rest.HTTPClientFor(cfg)
			if cerr == nil {
				defer utilnet.CloseIdleConnectionsFor(chc.Transport)
				s.clusters[name], cerr = kubernetes.NewForConfigAndClient(cfg, chc)
			}
			if cerr != nil {
				err = fmt.Errorf("cluster %s: %w", name, cerr)
				break
			}
		}
	}
	if err != nil {
		res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: "setup", Err: err})
		return res
	}
	trial := func(p perturbation) outcome {
		res.Trials++
		out := s.trial(ctx, p)
		name := p.name
		if out.missed != "" {
			name += " (not applied: " + out.missed + ")"
		}
		res.Ran = append(res.Ran, name)
		if out.err != nil {
			res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: name, Namespace: out.namespace,
				Err: out.err, History: out.history, After: time.Since(began)})
		}
		return out
	}
	first := trial(perturbation{name: "no perturbation"})
	if len(res.Failures) == 0 {
		for _, p := range s.schedule(first.writes, first.calls, first.seen) {
			if ctx.Err() != nil {
				break
			}
			trial(p)
		}
	}
	res.Took = time.Since(began)
	return res
}

// perturbation is what one trial does to the controller.
type perturbation struct {
	name  string
	holds []hold
	runFaults
	// resumeAfter is how long the stalled leader stays stalled once the
	// other replica leads.
	resumeAfter time.Duration
	// cut is the cluster cut off at cutAt (ClusterCuts), "" for none.
	cut   string
	cutAt time.Duration
	// moment is the Faults.Moments (1 for the first) at whose occurrence
	// the trial does atMoment; 0 for none.
	moment, occurrence int
	atMoment           string
}

// schedule is every perturbed trial of s, in order, drawn from the seed
// alone: the same seed and the same counts of writes, external writes
// (calls) and occurrences of each Moment (seen) in the unperturbed run
// give the same trials.
func (s Scenario) schedule(writes, calls int, seen []int) []perturbation {
	rnd := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	var ps []perturbation
	for i := range s.Faults.StaleTrials {
		holds := s.plan(rnd, s.Faults.StaleReads, false)
		ps = append(ps, perturbation{name: fmt.Sprintf("stale reads, trial %d: %s", i+1, describe(holds)), holds: holds})
	}
	for i := range s.Faults.RelistTrials {
		holds := s.plan(rnd, s.Faults.Relists, true)
		ps = append(ps, perturbation{name: fmt.Sprintf("relists, trial %d: %s", i+1, describe(holds)), holds: holds})
	}
	for i := range s.Faults.Failovers {
		if writes == 0 {
			break
		}
		n, more := 1+rnd.IntN(writes), time.Duration(rnd.Int64N(int64(s.Faults.MaxHold)))
		ps = append(ps, perturbation{name: fmt.Sprintf("failover, trial %d: the leader stalls before write %d of %d "+
			"until the other replica leads, and %s more", i+1, n, writes, more.Round(time.Millisecond)), runFaults: runFaults{stallAt: n}, resumeAfter: more})
	}
	clusters := slices.Sorted(maps.Keys(s.Clusters))
	for i := range s.Faults.ClusterCuts {
		c, at := clusters[rnd.IntN(len(clusters))], time.Duration(rnd.Int64N(int64(s.Faults.MaxHold)/2+1))
		ps = append(ps, perturbation{name: fmt.Sprintf("cluster cut, trial %d: %s cut off at +%s until the other clusters settle",
			i+1, c, at.Round(time.Millisecond)), cut: c, cutAt: at})
	}
	for i := range s.Faults.APIErrors {
		api := writes - calls
		if api == 0 {
			break
		}
		n, kind := 1+rnd.IntN(api), apiError(rnd.IntN(int(apiErrors)))
		ps = append(ps, perturbation{name: fmt.Sprintf("API error, trial %d: write %d of %d to the API server gets %s", i+1, n, api, kind),
			runFaults: runFaults{errAt: n, errKind: kind}})
	}
	for i := range s.Faults.Moments {
		ps = append(ps, s.momentTrials(i, seen[i])...)
	}
	if s.Faults.ExternalTimeouts {
		for n := 1; n <= calls; n++ {
			ps = append(ps, perturbation{name: fmt.Sprintf("external write %d of %d dropped: it times out before it reaches the application", n, calls),
				runFaults: runFaults{dropCall: n}})
			ps = append(ps, perturbation{name: fmt.Sprintf("external write %d of %d: the application acts on it, its answer is lost (a timeout)", n, calls),
				runFaults: runFaults{loseCall: n}})
		}
	}
	if s.Faults.CrashAtEveryWrite {
		for n := 1; n <= writes; n++ {
			ps = append(ps, perturbation{name: fmt.Sprintf("crash after write %d of %d", n, writes), runFaults: runFaults{crashAfter: n}})
		}
	}
	return ps
}

func (s Scenario) withDefaults() Scenario {
	if s.Timeout == 0 {
		s.Timeout = 60 * time.Second
	}
	if s.Quiet == 0 {
		s.Quiet = 500 * time.Millisecond
	}
	if s.Stall == 0 {
		s.Stall = s.Timeout / 4
	}
	if s.Faults.MaxHold == 0 {
		s.Faults.MaxHold = 2 * time.Second
	}
	if s.Faults.StaleTrials == 0 && len(s.Faults.StaleReads) > 0 {
		s.Faults.StaleTrials = 3
	}
	if s.Faults.RelistTrials == 0 && len(s.Faults.Relists) > 0 {
		s.Faults.RelistTrials = 3
	}
	return s
}

// validate says what in s cannot run.
func (s Scenario) validate() error {
	var errs []error
	if s.Config == nil || s.Run == nil || s.Workload == nil || s.Settled == nil {
		errs = append(errs, errors.New("Config, Run, Workload and Settled are required"))
	}
	if s.Faults.StaleTrials > 0 && len(s.Faults.StaleReads) == 0 {
		errs = append(errs, fmt.Errorf("%d stale-read trials, but no resource in Faults.StaleReads", s.Faults.StaleTrials))
	}
	if s.Faults.RelistTrials > 0 && len(s.Faults.Relists) == 0 {
		errs = append(errs, fmt.Errorf("%d relist trials, but no resource in Faults.Relists", s.Faults.RelistTrials))
	}
	for i, m := range s.Faults.Moments {
		if m.Name == "" || m.Watch == nil || m.When == nil {
			errs = append(errs, fmt.Errorf("Moments[%d] needs a Name, a Watch and a When", i))
		}
	}
	if s.Faults.ClusterCuts > 0 && len(s.Clusters) < 2 {
		errs = append(errs, fmt.Errorf("%d cluster-cut trials need two Clusters or more, not %d", s.Faults.ClusterCuts, len(s.Clusters)))
	}
	if s.Timeout < 0 || s.Quiet < 0 || s.Stall < 0 || s.Faults.MaxHold < 0 || s.Faults.StaleTrials < 0 || s.Faults.RelistTrials < 0 ||
		s.Faults.Failovers < 0 || s.Faults.ClusterCuts < 0 || s.Faults.APIErrors < 0 {
		errs = append(errs, errors.New("a negative duration or count"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("perturb: %w", err)
	}
	return nil
}

// runFaults are the perturbations of one run of the controller (the
// first run of a trial's replica a), counted in its writes; 0 for none.
type runFaults struct {
	crashAfter int // stop the controller after its Nth write
	stallAt    int // failover: the leader stalls before its Nth write
	dropCall   int // its Nth external write times out before it reaches the application
	loseCall   int // its Nth external write reaches the application, and its answer is lost
	errAt      int // its Nth write to the API server gets errKind instead of its answer
	errKind    apiError
}

// hold is one span of stale reads: resource held from at for d, and
// then, when relist, its watch cut and refused as after a compaction.
type hold struct {
	resource string
	at, d    time.Duration
	relist   bool
}

// plan draws the spans of one trial, from the resources.
func (s Scenario) plan(rnd *rand.Rand, resources []string, relist bool) []hold {
	var hs []hold
	at := time.Duration(0)
	for range 3 {
		h := hold{resource: resources[rnd.IntN(len(resources))], relist: relist,
			at: at, d: time.Duration(1 + rnd.Int64N(int64(s.Faults.MaxHold)))}
		hs = append(hs, h)
		at += h.d + time.Duration(rnd.Int64N(int64(s.Faults.MaxHold)/4+1))
	}
	return hs
}

func describe(hs []hold) string {
	var parts []string
	for _, h := range hs {
		then := ""
		if h.relist {
			then = " then relisted"
		}
		parts = append(parts, fmt.Sprintf("%s held at +%s for %s%s", h.resource, h.at.Round(time.Millisecond), h.d.Round(time.Millisecond), then))
	}
	return strings.Join(parts, ", ")
}
