package perturb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
// which goes through the perturbations.
type Env struct {
	Config    *rest.Config
	Namespace string
	Kube      kubernetes.Interface
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
	// CrashAtEveryWrite runs one trial per write of an unperturbed run:
	// trial N stops the controller right after its Nth write (every later
	// request fails, its context is cancelled) and starts it again.
	CrashAtEveryWrite bool
}

// Failure is one trial that broke an invariant or did not converge.
type Failure struct {
	Seed    uint64
	Trial   string // the perturbation, e.g. "crash after write 3"
	Err     error
	History []Write // the controller's writes in the trial, in order
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
// unperturbed one (which must pass: it counts the writes the crash trials
// stop after), then the stale-read trials, then one crash trial per write.
// In each, the controller must keep every invariant, settle, and leave a
// state that a fresh controller, started on it, changes no further.
func Check(ctx context.Context, s Scenario) Result {
	s = s.withDefaults()
	began := time.Now()
	var res Result
	hc, err := rest.HTTPClientFor(s.Config)
	if err == nil {
		defer utilnet.CloseIdleConnectionsFor(hc.Transport)
		s.kube, err = kubernetes.NewForConfigAndClient(s.Config, hc)
	}
	if err != nil {
		res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: "setup", Err: err})
		return res
	}
	rnd := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	trial := func(name string, crashAfter int, holds []hold) int {
		res.Trials++
		writes, err := s.trial(ctx, crashAfter, holds)
		if err != nil {
			res.Failures = append(res.Failures, Failure{Seed: s.Seed, Trial: name, Err: err.err, History: err.history})
		}
		return writes
	}
	writes := trial("no perturbation", 0, nil)
	if len(res.Failures) == 0 {
		for i := range s.Faults.StaleTrials {
			holds := s.plan(rnd)
			trial(fmt.Sprintf("stale reads, trial %d: %s", i+1, describe(holds)), 0, holds)
		}
		if s.Faults.CrashAtEveryWrite {
			for n := 1; n <= writes; n++ {
				trial(fmt.Sprintf("crash after write %d of %d", n, writes), n, nil)
			}
		}
	}
	res.Took = time.Since(began)
	return res
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
	return s
}

// hold is one span of stale reads: resource held from at for d.
type hold struct {
	resource string
	at, d    time.Duration
}

// plan draws the spans of one stale-read trial.
func (s Scenario) plan(rnd *rand.Rand) []hold {
	var hs []hold
	at := time.Duration(0)
	for range 3 {
		h := hold{resource: s.Faults.StaleReads[rnd.IntN(len(s.Faults.StaleReads))],
			at: at, d: time.Duration(1 + rnd.Int64N(int64(s.Faults.MaxHold)))}
		hs = append(hs, h)
		at += h.d + time.Duration(rnd.Int64N(int64(s.Faults.MaxHold)/4+1))
	}
	return hs
}

func describe(hs []hold) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s held at +%s for %s", h.resource, h.at.Round(time.Millisecond), h.d.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// trialError is a failed trial: why, and the controller's writes.
type trialError struct {
	err     error
	history []Write
}

// trial runs one trial in a fresh namespace and returns the writes of its
// first run of the controller.
func (s Scenario) trial(ctx context.Context, crashAfter int, holds []hold) (int, *trialError) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	env, err := s.namespace(ctx)
	if err != nil {
		return 0, &trialError{err: err}
	}
	c := &controllerRun{s: s, env: env}
	c.start(ctx, crashAfter)
	defer c.stop()
	failed := make(chan error, 1)
	checking, stopChecks := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait() // after stopChecks and cancel: no request of the trial outlives it
	defer stopChecks()
	bg.Go(func() { failed <- s.watchInvariants(checking, env) })
	bg.Go(func() { c.perturb(checking, holds) })
	if crashAfter > 0 {
		c.restartAfterCrash(ctx)
	}
	if err := s.Workload(ctx, env); err != nil {
		return 0, &trialError{err: fmt.Errorf("workload: %w", err), history: c.history()}
	}
	err = s.settle(ctx, env, c, failed)
	if err == nil {
		err = s.freshChangesNothing(ctx, env, c)
	}
	if err == nil {
		err = s.checkInvariants(ctx, env, true)
	}
	writes := len(c.first.history())
	if err != nil {
		return writes, &trialError{err: err, history: c.history()}
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

// settle waits until Settled holds and the controller has made no write
// for Quiet, or an invariant breaks.
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
		if last = s.Settled(ctx, env); last == nil && c.quietFor() >= s.Quiet {
			return nil
		}
	}
}

// freshChangesNothing stops the controller and starts a fresh one on the
// settled state: the state is the one a fresh controller computes only if
// none of its writes succeeds (a create answered AlreadyExists changes
// nothing).
func (s Scenario) freshChangesNothing(ctx context.Context, env Env, c *controllerRun) error {
	c.stop()
	fresh := &controllerRun{s: s, env: env}
	fresh.start(ctx, 0)
	defer fresh.stop()
	deadline := time.After(s.Timeout / 4)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for fresh.quietFor() < 2*s.Quiet {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("a fresh controller kept writing: %v", fresh.first.history())
		case <-tick.C:
		}
	}
	var changed []Write // writes that failed (409 AlreadyExists, ...) changed nothing
	for _, w := range fresh.first.history() {
		if w.Status >= 200 && w.Status < 300 {
			changed = append(changed, w)
		}
	}
	if len(changed) > 0 {
		return fmt.Errorf("a fresh controller changed the settled state: %v", changed)
	}
	return nil
}

// controllerRun is the controller under test in one trial: its first run
// and, after a crash, its restart.
type controllerRun struct {
	s     Scenario
	env   Env
	first *transport
	aux   sync.WaitGroup // the restarter
	mu    sync.Mutex
	runs  []*run
	done  bool // stop was called: start nothing more
}

// run is one run of the controller (one process's life).
type run struct {
	t      *transport
	cancel context.CancelFunc
	ended  chan struct{}
}

func (c *controllerRun) start(ctx context.Context, crashAfter int) {
	rctx, cancel := context.WithCancel(ctx)
	r := &run{t: newTransport(crashAfter, cancel), cancel: cancel, ended: make(chan struct{})}
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		cancel()
		return
	}
	if c.first == nil {
		c.first = r.t
	}
	c.runs = append(c.runs, r)
	c.mu.Unlock()
	env := Env{Config: r.t.wrap(c.env.Config), Namespace: c.env.Namespace, Kube: c.env.Kube}
	go func() {
		defer close(r.ended)
		_ = c.s.Run(rctx, env)
	}()
}

// restartAfterCrash starts the controller again once its first run has
// crashed and returned, as a supervisor restarts a process; nothing if it
// never crashes (fewer writes this time) before the trial ends.
func (c *controllerRun) restartAfterCrash(ctx context.Context) {
	c.aux.Go(func() {
		c.mu.Lock()
		first := c.runs[0]
		c.mu.Unlock()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !first.t.isCrashed() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		select {
		case <-first.ended:
			c.start(ctx, 0)
		case <-ctx.Done():
		}
	})
}

// perturb applies the stale-read spans, from the trial's start.
func (c *controllerRun) perturb(ctx context.Context, holds []hold) {
	began := time.Now()
	for _, h := range holds {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(began.Add(h.at))):
		}
		t := c.current()
		t.hold(h.resource)
		select {
		case <-ctx.Done():
		case <-time.After(h.d):
		}
		t.release(h.resource)
	}
}

func (c *controllerRun) current() *transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[len(c.runs)-1].t
}

// quietFor is how long the current run has made no write.
func (c *controllerRun) quietFor() time.Duration {
	t := c.current()
	ws := t.history()
	if len(ws) == 0 {
		return time.Since(t.start)
	}
	return time.Since(t.start) - ws[len(ws)-1].At
}

// history is every run's writes, in order.
func (c *controllerRun) history() []Write {
	c.mu.Lock()
	runs := append([]*run(nil), c.runs...)
	c.mu.Unlock()
	var out []Write
	for i, r := range runs {
		for _, w := range r.t.history() {
			if i > 0 {
				w.Path = fmt.Sprintf("%s (after restart %d)", w.Path, i)
			}
			out = append(out, w)
		}
	}
	return out
}

// stop stops every run, and the restarter, and waits for them.
func (c *controllerRun) stop() {
	c.mu.Lock()
	c.done = true
	runs := append([]*run(nil), c.runs...)
	c.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	c.aux.Wait()
	for _, r := range runs {
		<-r.ended
	}
}
