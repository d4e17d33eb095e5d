package perturb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// outcome is what one trial found.
type outcome struct {
	writes    int    // the controller's first run's writes
	calls     int    // how many of them were external (Env.External)
	seen      []int  // how many times each of Faults.Moments came
	missed    string // why the perturbation was not applied, "" when it was
	namespace string
	err       error   // nil when the trial passed
	history   []Write // the controller's writes, when err is set
}

// trial runs one trial in a fresh namespace. The namespace of a passing
// trial is deleted; a failing one's is kept for a look.
func (s Scenario) trial(ctx context.Context, p perturbation) outcome {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	env, err := s.namespace(ctx)
	if err != nil {
		return outcome{err: err}
	}
	out := s.run(ctx, env, p)
	out.namespace = env.Namespace
	if out.err == nil {
		// Best effort: a server without the namespace controller (the
		// embedded one) leaves it terminating, which costs nothing.
		_ = s.kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), env.Namespace, metav1.DeleteOptions{})
		for _, kube := range s.clusters {
			_ = kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), env.Namespace, metav1.DeleteOptions{})
		}
	}
	return out
}

// run runs the controller, the workload, the perturbation and the oracles
// of one trial in env.
func (s Scenario) run(ctx context.Context, env Env, p perturbation) outcome {
	f := &fleet{s: s, began: time.Now()}
	s.acts.begin(f.began)
	env.Clock = newClock(f.quietForClock) // the trial's time, kept across restarts and for the fresh controller
	f.env = env
	f.supervise(ctx, "a", p.runFaults)
	failed := make(chan error, 3) // the invariants' watch, the failover and the cluster cut each send at most once
	checking, stopChecks := context.WithCancel(ctx)
	var bg, perturbing sync.WaitGroup
	perturbed, workloadDone := make(chan struct{}), make(chan struct{})
	bg.Go(func() { failed <- s.watchInvariants(checking, env) })
	perturbing.Go(func() { f.perturb(checking, p.holds) })
	if p.cut != "" {
		perturbing.Go(func() { f.cutCluster(checking, env, p, workloadDone, failed) })
	}
	bg.Go(func() { perturbing.Wait(); close(perturbed) })
	if p.stallAt > 0 {
		bg.Go(func() { f.failover(checking, p.resumeAfter, failed) })
	}
	seen := make([]int, len(s.Faults.Moments)) // written by watchMoments until bg.Wait
	moments, err := f.openMoments(checking)
	if len(moments) > 0 {
		bg.Go(func() { f.watchMoments(checking, moments, p, seen) })
	}
	if err == nil {
		if err = s.Workload(ctx, env); err != nil {
			err = fmt.Errorf("workload: %w", err)
		}
	}
	close(workloadDone)
	if err == nil {
		err = s.settle(ctx, env, f, perturbed, failed)
	}
	if err == nil {
		err = s.freshChangesNothing(ctx, env, f)
	}
	if err == nil {
		err = s.checkInvariants(ctx, env, true)
	}
	stopChecks()
	bg.Wait()
	for len(failed) > 0 { // a break the watch saw after settling (the fresh controller's)
		if e := <-failed; e != nil && err == nil {
			err = e
		}
	}
	if e := f.stop(); e != nil && err == nil {
		err = e
	}
	ws := f.first().history()
	out := outcome{writes: len(ws), calls: f.first().externalWrites(), seen: seen, missed: f.missed(p)}
	if err != nil {
		out.err, out.history = f.failure(err), withActions(f.history(), s.acts.list())
	}
	return out
}

// namespace creates the trial's namespace.
func (s Scenario) namespace(ctx context.Context) (Env, error) {
	ns, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "perturb-"}}, metav1.CreateOptions{})
	if err != nil {
		return Env{}, fmt.Errorf("perturb: create the trial's namespace: %w", err)
	}
	for name, kube := range s.clusters { // the same namespace in every cluster of the fleet
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}, metav1.CreateOptions{}); err != nil {
			return Env{}, fmt.Errorf("perturb: create the trial's namespace in cluster %s: %w", name, err)
		}
	}
	return Env{Config: s.acts.wrap(s.Config), plain: s.Config, Namespace: ns.Name, Kube: s.kube, Clusters: s.Clusters, LeaseDuration: trialLeaseDuration,
		RenewDeadline: trialRenewDeadline, RetryPeriod: trialRetryPeriod}, nil
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

// settle waits until every span has been applied and every perturbation is
// over, Settled holds and the controller has been quiet for Quiet (no
// write, no perturbation ending), or an invariant breaks, or the
// controller is stuck: Settled fails and it has made no write for Stall
// (since the workload ended and since the last perturbation).
func (s Scenario) settle(ctx context.Context, env Env, f *fleet, perturbed <-chan struct{}, failed <-chan error) error {
	began := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	why := errors.New("not checked yet")
	for {
		select {
		case err := <-failed:
			if err != nil {
				return err
			}
			failed = nil
		case <-ctx.Done():
			return fmt.Errorf("did not settle within %s: %v", s.Timeout, why)
		case <-tick.C:
		}
		select {
		case <-perturbed:
		default:
			why = errors.New("perturbations still under way")
			continue
		}
		err := s.Settled(ctx, env)
		quiet := f.quietFor()
		switch {
		case err != nil && ctx.Err() == nil:
			why = err
			if stuck := min(quiet, time.Since(began)); stuck >= s.Stall {
				return fmt.Errorf("stuck: the controller has made no write for %s and Settled still fails (Scenario.Stall): %w",
					stuck.Round(time.Millisecond), err)
			}
		case err == nil && quiet < s.Quiet:
			why = fmt.Errorf("Settled holds, but the controller wrote or was perturbed %s ago (it must be quiet for %s)",
				quiet.Round(time.Millisecond), s.Quiet)
		case err == nil:
			return nil
		}
	}
}

// freshChangesNothing stops the controller and starts a fresh one on the
// settled state: the state is the one a fresh controller computes only if
// none of its writes succeeds (a create answered AlreadyExists changes
// nothing) once it has taken over.
func (s Scenario) freshChangesNothing(ctx context.Context, env Env, f *fleet) error {
	if err := f.stop(); err != nil {
		return err
	}
	fresh := &fleet{s: s, env: env, began: time.Now()}
	fresh.supervise(ctx, "a", runFaults{})
	err := s.watchFresh(ctx, fresh)
	if e := fresh.stop(); e != nil && err == nil {
		err = e
	}
	if err != nil {
		if runs := fresh.runErrors(); runs != "" {
			err = fmt.Errorf("%w (the fresh controller's Run returned: %s)", err, runs)
		}
	}
	return err
}

// watchFresh waits until the fresh controller leads (when there is a Lease
// in the namespace), then for it to be quiet for twice Quiet, and says
// whether any of its writes succeeded.
func (s Scenario) watchFresh(ctx context.Context, fresh *fleet) error {
	deadline, cancel := context.WithTimeout(ctx, s.Timeout/4)
	defer cancel()
	if err := fresh.awaitLeader(deadline, "a", true); err != nil {
		return fmt.Errorf("the fresh controller: %w", err)
	}
	fresh.floor(time.Now())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for fresh.quietFor() < 2*s.Quiet {
		select {
		case <-deadline.Done():
			return fmt.Errorf("a fresh controller kept writing for %s: %v", s.Timeout/4, fresh.history())
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

// withActions merges the test's writes into the controller's, by time.
func withActions(ws, acts []Write) []Write {
	ws = append(ws, acts...)
	slices.SortStableFunc(ws, func(x, y Write) int { return cmp.Compare(x.At, y.At) })
	return ws
}
