package perturb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Env is what one trial runs in: the API server's configuration and a
// namespace of its own, fresh for the trial. Kube is an unperturbed client
// for the workload and the checks (its connections are closed when Check
// returns); the controller under test builds its clients from Config,
// which goes through the perturbations. Replica names the controller's
// process ("a", or "b" for the second replica of a failover trial; the
// same after a restart, as a Pod's name is): with Faults.Failovers, Run
// must elect a leader with Replica as its identity and the Lease in
// Namespace.
type Env struct {
	Config    *rest.Config
	Namespace string
	Kube      kubernetes.Interface
	Replica   string
}

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
	// controllers), against env until ctx ends. After a crash it is called
	// again, as a restarted process would be: it must build everything
	// anew (caches, queues).
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
	// Seed decides every perturbation; a failure prints it, and the same
	// Seed plays the same perturbations again (the API server's timing
	// is real, so a race may need a few runs to show again).
	Seed uint64
	// Faults are the perturbations tried.
	Faults Faults
	// Timeout bounds each trial. Default: 60s.
	Timeout time.Duration
	// Quiet is how long the controller must make no write, once Settled
	// holds, for a trial to end; and how long a fresh controller is given
	// to show it would change nothing. Default: 500ms.
	Quiet time.Duration

	kube kubernetes.Interface // Check's unperturbed client
}

// Faults are the perturbations a Scenario tries.
type Faults struct {
	// StaleReads lists resources (e.g. "secrets") whose watch streams are
	// held back while the workload runs, in spans of up to MaxHold
	// (default 2s) chosen from the seed: the controller's cache of them
	// falls behind and its reconciles read an old state.
	StaleReads []string
	MaxHold    time.Duration
	// StaleTrials is how many trials with stale reads run, each with its
	// own spans. Default: 3 when StaleReads is set.
	StaleTrials int
	// Relists lists resources whose watch streams are, in spans of up to
	// MaxHold chosen from the seed, held back and then cut, the next watch
	// answered 410 Gone as after a compaction of the server's history: the
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
	// request fails, its context is cancelled) and starts it again.
	CrashAtEveryWrite bool
	// Failovers is how many trials run two replicas of the controller
	// (see Env.Replica) in which the leader stalls, as a paused process
	// does, right before its Nth write (N from the seed, at most the
	// unperturbed run's writes): none of its requests reaches the server
	// until the other replica holds the lease and a while more (up to
	// MaxHold, from the seed), and then they all do,
	// that write included, even if the replica has given up its lease
	// meanwhile (a write already on its way is not called back). A
	// replica whose Run returns is started again, as its Pod would be.
	Failovers int
}

// Failure is one trial that broke an invariant or did not converge.
type Failure struct {
	Seed    uint64
	Trial   string // the perturbation, e.g. "crash after write 3"
	Err     error
	History []Write       // the controller's writes in the trial, in order
	After   time.Duration // how long Check had run when the trial ended
}

func (f Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "perturb: seed %d, %s: %v\nwrites:", f.Seed, f.Trial, f.Err)
	for _, w := range f.History {
		fmt.Fprintf(&b, "\n  %s", w)
	}
	return b.String()
}

// Result is what a Scenario's trials found.
type Result struct {
	Trials   int
	Ran      []string // each trial's perturbation, in order
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
	if err == nil {
		hc, err = rest.HTTPClientFor(s.Config)
	}
	if err == nil {
		defer utilnet.CloseIdleConnectionsFor(hc.Transport)
		s.kube, err = kubernetes.NewForConfigAndClient(s.Config, hc)
	}
	if err != nil {
		res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: "setup", Err: err})
		return res
	}
	trial := func(p perturbation) int {
		res.Trials++
		res.Ran = append(res.Ran, p.name)
		writes, err := s.trial(ctx, p)
		if err != nil {
			res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: p.name, Err: err.err, History: err.history,
				After: time.Since(began)})
		}
		return writes
	}
	writes := trial(perturbation{name: "no perturbation"})
	if len(res.Failures) == 0 {
		for _, p := range s.schedule(writes) {
			trial(p)
		}
	}
	res.Took = time.Since(began)
	return res
}

// perturbation is what one trial does to the controller.
type perturbation struct {
	name       string
	holds      []hold
	crashAfter int // stop the controller after its Nth write
	stallAt    int // failover: the leader stalls before its Nth write
	// resumeAfter is how long the stalled leader stays stalled once the
	// other replica leads.
	resumeAfter time.Duration
}

// schedule is every perturbed trial of s, in order, drawn from the seed
// alone: the same seed and the same count of writes in the unperturbed
// run give the same trials.
func (s Scenario) schedule(writes int) []perturbation {
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
			"until the other replica leads, and %s more", i+1, n, writes, more.Round(time.Millisecond)), stallAt: n, resumeAfter: more})
	}
	if s.Faults.CrashAtEveryWrite {
		for n := 1; n <= writes; n++ {
			ps = append(ps, perturbation{name: fmt.Sprintf("crash after write %d of %d", n, writes), crashAfter: n})
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
	if s.Timeout < 0 || s.Quiet < 0 || s.Faults.MaxHold < 0 || s.Faults.StaleTrials < 0 || s.Faults.RelistTrials < 0 || s.Faults.Failovers < 0 {
		errs = append(errs, errors.New("a negative duration or count"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("perturb: %w", err)
	}
	return nil
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

// trialError is a failed trial: why, and the controller's writes.
type trialError struct {
	err     error
	history []Write
}

// trial runs one trial in a fresh namespace and returns the writes of the
// controller's first run.
func (s Scenario) trial(ctx context.Context, p perturbation) (int, *trialError) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	env, err := s.namespace(ctx)
	if err != nil {
		return 0, &trialError{err: err}
	}
	c := &controllerRun{s: s, env: env, began: time.Now(), perturbed: make(chan struct{})}
	defer c.stop()
	c.supervise(ctx, "a", p.crashAfter, p.stallAt)
	failed := make(chan error, 2) // the invariants' watch and the failover each send at most once
	checking, stopChecks := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait() // after stopChecks and cancel: no request of the trial outlives it
	defer stopChecks()
	bg.Go(func() { failed <- s.watchInvariants(checking, env) })
	bg.Go(func() { c.perturb(checking, p.holds); close(c.perturbed) })
	if p.stallAt > 0 {
		bg.Go(func() { c.failover(checking, p.resumeAfter, failed) })
	}
	if err := s.Workload(ctx, env); err != nil {
		return 0, c.failure(fmt.Errorf("workload: %w", err))
	}
	err = s.settle(ctx, env, c, failed)
	if err == nil {
		err = s.freshChangesNothing(ctx, env, c)
	}
	if err == nil {
		err = s.checkInvariants(ctx, env, true)
	}
	writes := len(c.first().history())
	if err != nil {
		return writes, c.failure(err)
	}
	return writes, nil
}

// namespace creates the trial's namespace.
func (s Scenario) namespace(ctx context.Context) (Env, error) {
	ns, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "perturb-"}}, metav1.CreateOptions{})
	if err != nil {
		return Env{}, fmt.Errorf("perturb: create the trial's namespace: %w", err)
	}
	return Env{Config: s.Config, Namespace: ns.Name, Kube: s.kube}, nil
}

// checkInvariants checks every invariant once; the Eventually ones only
// when settled.
func (s Scenario) checkInvariants(ctx context.Context, env Env, settled bool) error {
	for _, inv := range s.Invariants {
		if inv.Eventually && !settled {
			continue
		}
		if err := inv.Check(ctx, env); err != nil {
			return fmt.Errorf("invariant %q broken: %w", inv.Name, err)
		}
	}
	return nil
}

// watchInvariants checks the invariants every 20ms until ctx ends, and
// returns the first broken one.
func (s Scenario) watchInvariants(ctx context.Context, env Env) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.checkInvariants(ctx, env, false); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// settle waits until every perturbation has been applied and is over, Settled
// holds and the controller has been quiet for Quiet (no write, no span
// ending), or an invariant breaks.
func (s Scenario) settle(ctx context.Context, env Env, c *controllerRun, failed <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case err := <-failed:
			if err != nil {
				return err
			}
			failed = nil
		case <-ctx.Done():
			return fmt.Errorf("did not settle within %s: %v", s.Timeout, last)
		case <-tick.C:
		}
		prev := last
		select {
		case <-c.perturbed:
		default:
			last = errors.New("perturbations still under way")
			continue
		}
		if last = s.Settled(ctx, env); last == nil && c.quietFor() >= s.Quiet {
			return nil
		}
		if ctx.Err() != nil && prev != nil { // keep why it had not settled, not that time ran out
			last = prev
		}
	}
}

// freshChangesNothing stops the controller and starts a fresh one on the
// settled state: the state is the one a fresh controller computes only if
// none of its writes succeeds (a create answered AlreadyExists changes
// nothing).
func (s Scenario) freshChangesNothing(ctx context.Context, env Env, c *controllerRun) error {
	c.stop()
	fresh := &controllerRun{s: s, env: env, began: time.Now(), perturbed: make(chan struct{})}
	close(fresh.perturbed)
	defer fresh.stop()
	fresh.supervise(ctx, "a", 0, 0)
	deadline := time.After(s.Timeout / 4)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for fresh.quietFor() < 2*s.Quiet {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("a fresh controller kept writing: %v", fresh.history())
		case <-tick.C:
		}
	}
	var changed []Write // writes that failed (409 AlreadyExists, ...) changed nothing
	for _, w := range fresh.history() {
		if w.Status >= 200 && w.Status < 300 {
			changed = append(changed, w)
		}
	}
	if len(changed) > 0 {
		return fmt.Errorf("a fresh controller changed the settled state: %v", changed)
	}
	return nil
}

// controllerRun is the controller under test in one trial: its replicas
// (one, or two in a failover trial), each a run at a time, started again
// when a run ends while the trial goes on.
type controllerRun struct {
	s         Scenario
	env       Env
	began     time.Time      // writes are timed from here
	perturbed chan struct{}  // closed once every perturbation has been applied
	aux       sync.WaitGroup // the supervisors
	mu        sync.Mutex
	runs      []*run // every run of every replica, in start order
	done      bool   // stop was called: start nothing more
}

// run is one run of one replica of the controller (one process's life).
type run struct {
	replica string
	restart int // 0 for the replica's first run
	started time.Time
	t       *transport
	cancel  context.CancelFunc
	ended   chan struct{}
	err     error // what Run returned, once ended
}

// supervise starts the replica and, whenever its run ends before the trial
// does, starts it again after 100ms (a crash-looping Run shows in the
// failure as the errors it returned), as a kubelet restarts a container.
func (c *controllerRun) supervise(ctx context.Context, replica string, crashAfter, stallAt int) {
	r := c.start(ctx, replica, 0, crashAfter, stallAt)
	if r == nil {
		return
	}
	c.aux.Go(func() {
		for n := 1; ; n++ {
			select {
			case <-r.ended:
			case <-ctx.Done():
				return
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if r = c.start(ctx, replica, n, 0, 0); r == nil {
				return
			}
		}
	})
}

// start starts a run, nil once stop was called.
func (c *controllerRun) start(ctx context.Context, replica string, restart, crashAfter, stallAt int) *run {
	rctx, cancel := context.WithCancel(ctx)
	r := &run{replica: replica, restart: restart, started: time.Now(), t: newTransport(c.began, crashAfter, stallAt, cancel), cancel: cancel, ended: make(chan struct{})}
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		cancel()
		return nil
	}
	c.runs = append(c.runs, r)
	c.mu.Unlock()
	env := Env{Config: r.t.wrap(c.env.Config), Namespace: c.env.Namespace, Kube: c.env.Kube, Replica: replica}
	go func() {
		defer close(r.ended)
		r.err = c.s.Run(rctx, env)
	}()
	return r
}

// failover makes the trial a failover: once the first replica leads, a
// second starts; when the leader stalls (at the write its transport was
// told), the stall lasts until the second replica holds the lease, and
// for more. A leader that makes fewer writes this time never stalls.
func (c *controllerRun) failover(ctx context.Context, more time.Duration, failed chan<- error) {
	a := c.first()
	if err := c.awaitLeader(ctx, "a"); err != nil {
		failed <- err
		return
	}
	c.supervise(ctx, "b", 0, 0)
	select {
	case <-a.stalled:
	case <-ctx.Done():
		return
	}
	if err := c.awaitLeader(ctx, "b"); err != nil {
		failed <- err
	}
	select {
	case <-time.After(more):
	case <-ctx.Done():
	}
	a.resume()
}

// awaitLeader waits until a Lease in the trial's namespace names replica
// as its holder.
func (c *controllerRun) awaitLeader(ctx context.Context, replica string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := c.env.Kube.CoordinationV1().Leases(c.env.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, le := range l.Items {
				if h := le.Spec.HolderIdentity; h != nil && *h == replica {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: replica %q never held a Lease in the namespace (does Run elect a leader "+
				"with Env.Replica as its identity and the Lease in Env.Namespace?)", replica)
		case <-tick.C:
		}
	}
}

// perturb applies the spans, from the trial's start.
func (c *controllerRun) perturb(ctx context.Context, holds []hold) {
	began := time.Now()
	for _, h := range holds {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(began.Add(h.at))):
		}
		t := c.latest()
		t.hold(h.resource)
		select {
		case <-ctx.Done():
		case <-time.After(h.d):
		}
		if h.relist {
			t.relist(h.resource)
		} else {
			t.release(h.resource)
		}
	}
}

func (c *controllerRun) first() *transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[0].t
}

func (c *controllerRun) latest() *transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[len(c.runs)-1].t
}

func (c *controllerRun) all() []*run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*run(nil), c.runs...)
}

// quietFor is how long no run has started, made a write or been perturbed
// (0 while a perturbation is under way).
func (c *controllerRun) quietFor() time.Duration {
	var last time.Time
	for _, r := range c.all() {
		busy, since := r.t.settling()
		if busy {
			return 0
		}
		if r.started.After(last) { // a run is given Quiet from its start
			last = r.started
		}
		if ws := r.t.history(); len(ws) > 0 {
			since = max(since, ws[len(ws)-1].At)
		}
		if at := r.t.start.Add(since); at.After(last) {
			last = at
		}
	}
	return time.Since(last)
}

// history is every run's writes, in the order they were made.
func (c *controllerRun) history() []Write {
	type at struct {
		w Write
		t time.Time
	}
	var ws []at
	for _, r := range c.all() {
		for _, w := range r.t.history() {
			if r.replica != "a" {
				w.Path += " (replica " + r.replica + ")"
			}
			if r.restart > 0 {
				w.Path += fmt.Sprintf(" (after restart %d)", r.restart)
			}
			ws = append(ws, at{w, r.t.start.Add(w.At)})
		}
	}
	slices.SortStableFunc(ws, func(x, y at) int { return x.t.Compare(y.t) })
	out := make([]Write, len(ws))
	for i, w := range ws {
		out[i] = w.w
	}
	return out
}

// failure is a failed trial: err, with what the runs of the controller
// returned (other than the end of their context), and the writes.
func (c *controllerRun) failure(err error) *trialError {
	var errs []string
	for _, r := range c.all() {
		select {
		case <-r.ended:
		default:
			continue
		}
		if r.err != nil && !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, ErrCrashed) {
			errs = append(errs, fmt.Sprintf("replica %s, run %d: %v", r.replica, r.restart+1, r.err))
		}
	}
	if len(errs) > 0 {
		err = fmt.Errorf("%w (the controller's Run returned: %s)", err, strings.Join(errs, "; "))
	}
	return &trialError{err: err, history: c.history()}
}

// stop stops every run and the supervisors, and waits for them.
func (c *controllerRun) stop() {
	c.mu.Lock()
	c.done = true
	runs := append([]*run(nil), c.runs...)
	c.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		r.t.resume() // a stalled run's held requests go out, so that it can end
	}
	c.aux.Wait()
	for _, r := range c.all() { // and any the supervisors started meanwhile
		r.cancel()
		<-r.ended
	}
}
