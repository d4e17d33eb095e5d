package perturb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// fleet is the controller under test in one trial: its replicas (one, or
// two in a failover trial), each a run at a time, started again when a
// run ends while the trial goes on.
type fleet struct {
	s     Scenario
	env   Env
	began time.Time // writes are timed from here

	aux    sync.WaitGroup // the supervisors
	mu     sync.Mutex
	runs   []*run    // every run of every replica, in start order
	done   bool      // stop was called: start nothing more
	quiet0 time.Time // quietFor counts from here at the earliest

	cut   atomic.Pointer[string] // the cluster cut off now, if one is (ClusterCuts)
	fired atomic.Bool            // the trial's Moment came, and it acted there
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

func (r *run) over() bool {
	select {
	case <-r.ended:
		return true
	default:
		return false
	}
}

// supervise starts the replica and, whenever its run ends before the trial
// does, starts it again after 100ms, as a kubelet restarts a container.
func (f *fleet) supervise(ctx context.Context, replica string, rf runFaults) {
	r := f.start(ctx, replica, 0, rf)
	if r == nil {
		return
	}
	f.mu.Lock()
	if f.done { // stop cancels r and waits for it
		f.mu.Unlock()
		return
	}
	f.aux.Add(1) // under mu with the check of done: never once stop's Wait began
	f.mu.Unlock()
	go func() {
		defer f.aux.Done()
		for n := 1; r != nil; n++ {
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
			r = f.start(ctx, replica, n, runFaults{})
		}
	}()
}

// start starts a run, nil once stop was called.
func (f *fleet) start(ctx context.Context, replica string, restart int, rf runFaults) *run {
	rctx, cancel := context.WithCancel(ctx)
	r := &run{replica: replica, restart: restart, started: time.Now(), cancel: cancel, ended: make(chan struct{}),
		t: newTransport(replica, restart, f.began, rf, cancel)}
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		cancel()
		return nil
	}
	f.runs = append(f.runs, r)
	f.mu.Unlock()
	r.t.cut, r.t.clock = f.isCut, f.env.Clock
	env := f.env
	env.Config, env.Replica, env.run = r.t.wrap(f.env.plain, ""), replica, r.t
	if len(f.env.Clusters) > 0 {
		env.Clusters = make(map[string]*rest.Config, len(f.env.Clusters))
		for name, cfg := range f.env.Clusters {
			env.Clusters[name] = r.t.wrap(cfg, name)
		}
	}
	go func() {
		defer close(r.ended)
		r.err = f.s.Run(rctx, env)
	}()
	return r
}

// failover makes the trial a failover: once the first replica leads, a
// second starts; when the leader stalls (at the write its transport was
// told), the stall lasts until the second replica holds the lease, and
// for more. A leader that makes fewer writes this time never stalls.
func (f *fleet) failover(ctx context.Context, more time.Duration, failed chan<- error) {
	a := f.first()
	bound, cancel := context.WithTimeout(ctx, f.s.Timeout/2)
	defer cancel()
	if err := f.awaitLeader(bound, "a", false); err != nil {
		failed <- err
		return
	}
	f.supervise(ctx, "b", runFaults{})
	select {
	case <-a.stalled:
	case <-ctx.Done():
		return
	}
	bound, cancel = context.WithTimeout(ctx, f.s.Timeout/2)
	defer cancel()
	if err := f.awaitLeader(bound, "b", false); err != nil {
		failed <- err
	}
	select {
	case <-time.After(more):
	case <-ctx.Done():
	}
	a.resume()
}

// awaitLeader waits until a Lease in the trial's namespace names replica
// as its holder, or ctx ends. With ifElecting, a namespace that holds no
// Lease at all (the controller does not elect a leader) ends the wait too.
func (f *fleet) awaitLeader(ctx context.Context, replica string, ifElecting bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := f.env.Kube.CoordinationV1().Leases(f.env.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			if ifElecting && len(l.Items) == 0 {
				return nil
			}
			for _, le := range l.Items {
				if h := le.Spec.HolderIdentity; h != nil && *h == replica {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %q never held a Lease in the namespace (does Run elect a leader "+
				"with Env.Replica as its identity and the Lease in Env.Namespace?)", replica)
		case <-tick.C:
		}
	}
}

// perturb applies the spans, from the trial's start.
func (f *fleet) perturb(ctx context.Context, holds []hold) {
	for _, h := range holds {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(f.began.Add(h.at))):
		}
		t := f.latest()
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

// isCut reports whether cluster is cut off now.
func (f *fleet) isCut(cluster string) bool {
	c := f.cut.Load()
	return c != nil && *c == cluster
}

// cutCluster cuts p.cut off at p.cutAt from the trial's start: every
// request of the controller to it fails (ErrClusterCut) and its watch
// streams end, in every run, until the workload is done and the other
// clusters have settled (Settled, given an Env without the cut one). If
// they do not within Stall of the workload's end, it sends the failure.
// Then the cluster is back.
func (f *fleet) cutCluster(ctx context.Context, env Env, p perturbation, workloadDone <-chan struct{}, failed chan<- error) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(f.began.Add(p.cutAt))):
	}
	f.cut.Store(&p.cut)
	for _, r := range f.all() {
		r.t.cutStreams(p.cut)
	}
	defer func() {
		f.cut.Store(nil)
		f.floor(time.Now()) // quiet counts from the cluster's return
	}()
	select {
	case <-ctx.Done():
		return
	case <-workloadDone:
	}
	others := env
	others.Clusters = maps.Clone(env.Clusters)
	delete(others.Clusters, p.cut)
	ended := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f.s.Settled(ctx, others)
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Since(ended) >= f.s.Stall {
			failed <- fmt.Errorf("with cluster %s cut off, the other clusters did not settle within %s (Scenario.Stall): %w",
				p.cut, f.s.Stall, err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// missed says why p was not applied ("" when it was): the controller made
// fewer writes than in the unperturbed trial.
func (f *fleet) missed(p perturbation) string {
	a := f.first()
	switch {
	case p.crashAfter > 0 && !a.isCrashed():
		return fmt.Sprintf("the controller made fewer than %d writes", p.crashAfter)
	case p.stallAt > 0:
		select {
		case <-a.stalled:
		default:
			return fmt.Sprintf("the leader made fewer than %d writes", p.stallAt)
		}
	case p.moment > 0 && !f.fired.Load():
		return fmt.Sprintf("moment %q came fewer than %d times", f.s.Faults.Moments[p.moment-1].Name, p.occurrence)
	case p.errAt > a.writesToServer():
		return fmt.Sprintf("the controller made fewer than %d writes to the API server", p.errAt)
	case max(p.dropCall, p.loseCall) > a.externalWrites():
		return fmt.Sprintf("the controller made fewer than %d external writes", max(p.dropCall, p.loseCall))
	}
	return ""
}

func (f *fleet) first() *transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[0].t
}

func (f *fleet) latest() *transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[len(f.runs)-1].t
}

func (f *fleet) all() []*run {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.runs)
}

// floor makes quietFor count from at, at the earliest.
func (f *fleet) floor(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quiet0 = at
}

// quietFor is how long no run that is still going has started, made a
// write or been perturbed (0 while a perturbation is under way).
func (f *fleet) quietFor() time.Duration {
	if f.cut.Load() != nil {
		return 0
	}
	f.mu.Lock()
	last := f.quiet0
	f.mu.Unlock()
	for _, r := range f.all() {
		if r.over() {
			continue
		}
		busy, since := r.t.settling()
		if busy {
			return 0
		}
		if ws := r.t.history(); len(ws) > 0 {
			since = max(since, ws[len(ws)-1].At)
		}
		last = latest(last, r.started, f.began.Add(since))
	}
	return time.Since(last)
}

// runWarmup is how long a run starting (after a crash, say) counts as
// busy for the trial's clock: its caches fill and it reconciles what it
// finds before the clock jumps past it.
const runWarmup = 500 * time.Millisecond

// quietForClock is quietFor, but a replica being restarted, or whose run
// started less than runWarmup ago, counts as busy: the clock's Advance
// jumps only once it is quiet, and never past a restart.
func (f *fleet) quietForClock() time.Duration {
	q := f.quietFor()
	latest := map[string]*run{}
	for _, r := range f.all() { // in start order: the last one of a replica is its latest
		latest[r.replica] = r
	}
	for _, r := range latest {
		if r.over() {
			return 0
		}
		q = min(q, time.Since(r.started)-runWarmup)
	}
	return q
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// history is every run's writes, in the order they were made.
func (f *fleet) history() []Write {
	var ws []Write
	for _, r := range f.all() {
		ws = append(ws, r.t.history()...)
	}
	slices.SortStableFunc(ws, func(x, y Write) int { return cmp.Compare(x.At, y.At) })
	return ws
}

// runErrors says what the runs that ended returned, other than the end of
// their context or a crash; "" when nothing else.
func (f *fleet) runErrors() string {
	var errs []runError
	for _, r := range f.all() {
		if !r.over() {
			continue
		}
		if r.err != nil && !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, ErrCrashed) {
			errs = append(errs, runError{replica: r.replica, run: r.restart + 1, err: r.err.Error()})
		}
	}
	return groupRunErrors(errs)
}

// runError is what one run of a replica returned.
type runError struct {
	replica string
	run     int
	err     string
}

// groupRunErrors says errs once per replica and message, in the order they
// first came, with the runs that returned it: a controller that cannot
// start returns the same error at every restart (every 100ms), which once
// filled a failure with 291 copies.
func groupRunErrors(errs []runError) string {
	type group struct {
		first, last, n int
	}
	var order []runError
	groups := map[runError]*group{}
	for _, e := range errs {
		k := runError{replica: e.replica, err: e.err}
		g := groups[k]
		if g == nil {
			g = &group{first: e.run}
			groups[k] = g
			order = append(order, k)
		}
		g.last, g.n = e.run, g.n+1
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		g := groups[k]
		if g.n == 1 {
			out = append(out, fmt.Sprintf("replica %s, run %d: %s", k.replica, g.first, k.err))
			continue
		}
		out = append(out, fmt.Sprintf("replica %s, runs %d to %d (%d times): %s", k.replica, g.first, g.last, g.n, k.err))
	}
	return strings.Join(out, "; ")
}

// failure is err with what the runs of the controller returned.
func (f *fleet) failure(err error) error {
	if runs := f.runErrors(); runs != "" {
		return fmt.Errorf("%w (the controller's Run returned: %s)", err, runs)
	}
	return err
}

// stopWait bounds how long stop waits for Run to return once its context
// ended.
const stopWait = 30 * time.Second

// stop stops every run and the supervisors and waits for them; an error
// says a Run did not return within stopWait of its context's end (it is
// left running). Calling stop again returns at once.
func (f *fleet) stop() error {
	f.mu.Lock()
	f.done = true // no run starts after this: runs is every run there is
	runs := slices.Clone(f.runs)
	f.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		r.t.shutdown() // a stalled run's requests go out, so that it can end
	}
	f.aux.Wait()
	deadline := time.After(stopWait)
	for _, r := range runs {
		select {
		case <-r.ended:
		case <-deadline:
			return fmt.Errorf("replica %s's Run did not return within %s of its context's end", r.replica, stopWait)
		}
	}
	return nil
}
