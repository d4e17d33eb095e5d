package perturb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// every is the schedule of the ticker's owners.
const every = time.Hour

// ticker runs a job on a schedule, as CronJob's controller does: every
// hour from its creation, an owner (a ConfigMap labelled role=scheduled)
// gets a run (a ConfigMap labelled run-of=OWNER, annotated with the tick),
// the latest tick only when several were missed, and the owner's
// annotation "last" records the tick it ran. Its time is now's, the
// queue's waits the queue's clock: the trial's in a test, the real one in
// production. buggy names the run with GenerateName: a crash between the
// run's create and the owner's update runs the same tick again after the
// restart (idempotency lost across time). The fixed one names the run by
// its owner and tick, so the second create fails AlreadyExists.
type ticker struct {
	buggy  bool
	kube   kubernetes.Interface
	owners func(object.ObjectName) (*corev1.ConfigMap, bool)
	now    func() time.Time
}

func (k *ticker) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	owner, ok := k.owners(name)
	if !ok || owner.DeletionTimestamp != nil {
		return controller.Result{}, nil
	}
	last, err := lastTick(owner)
	if err != nil {
		return controller.Result{}, err
	}
	now := k.now()
	if next := last.Add(every); now.Before(next) {
		return controller.Result{RequeueAfter: next.Sub(now)}, nil
	}
	tick := last.Add(now.Sub(last).Truncate(every)) // the latest tick due
	unix := strconv.FormatInt(tick.Unix(), 10)
	run := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"run-of": name.Name},
		Annotations: map[string]string{"tick": unix}}}
	if k.buggy {
		run.GenerateName = name.Name + "-"
	} else {
		run.Name = name.Name + "-" + unix
	}
	cms := k.kube.CoreV1().ConfigMaps(name.Namespace)
	if _, err := cms.Create(ctx, run, metav1.CreateOptions{}); err != nil && !(apierrors.IsAlreadyExists(err) && !k.buggy) {
		return controller.Result{}, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": owner.ResourceVersion,
		"annotations": map[string]string{"last": unix}}})
	if err != nil {
		return controller.Result{}, err
	}
	if _, err := cms.Patch(ctx, name.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return controller.Result{}, err
	}
	return controller.Result{RequeueAfter: tick.Add(every).Sub(now)}, nil
}

// lastTick is the tick owner last ran, its creation before the first.
func lastTick(owner *corev1.ConfigMap) (time.Time, error) {
	s, ok := owner.Annotations["last"]
	if !ok {
		return owner.CreationTimestamp.Time, nil
	}
	unix, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("owner %s: annotation last %q: %w", owner.Name, s, err)
	}
	return time.Unix(unix, 0), nil
}

func tickerScenario(t *testing.T, buggy bool) perturb.Scenario {
	const ticks = 2
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run: runManager(func(m *manager.Manager, e perturb.Env) error {
			owners := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=scheduled"})
			k := &ticker{buggy: buggy, kube: m.Kube(), owners: owners.Reader().Get, now: e.Clock.Now}
			_, err := manager.NewController(m, "ticker", k, manager.ControllerOptions{
				Options: controller.Options[object.ObjectName]{Clock: e.Clock}}, manager.For(owners))
			return err
		}),
		Workload: func(ctx context.Context, e perturb.Env) error {
			owner, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: "nightly", Labels: map[string]string{"role": "scheduled"}}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			for i := 1; i <= ticks; i++ { // an hour passes, the controller runs the tick, and again
				if err := e.Clock.Advance(ctx, every); err != nil {
					return err
				}
				tick := owner.CreationTimestamp.Add(time.Duration(i) * every).Unix()
				if err := until(ctx, func() (bool, error) {
					runs, err := runsOf(ctx, e)
					return len(runs[tick]) > 0, err
				}); err != nil {
					return fmt.Errorf("waiting for the run of tick %d: %w", i, err)
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			owner, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, "nightly", metav1.GetOptions{})
			if err != nil {
				return err
			}
			last, err := lastTick(owner)
			if err != nil {
				return err
			}
			due := owner.CreationTimestamp.Add(e.Clock.Since(owner.CreationTimestamp.Time).Truncate(every))
			runs, err := runsOf(ctx, e)
			if err != nil {
				return err
			}
			if !last.Equal(due) || len(runs[due.Unix()]) == 0 {
				return fmt.Errorf("the last tick run is %s, want %s (with its run)", last.UTC(), due.UTC())
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "a tick runs once", Check: func(ctx context.Context, e perturb.Env) error {
			runs, err := runsOf(ctx, e)
			if err != nil {
				return err
			}
			for tick, names := range runs {
				if len(names) > 1 {
					return fmt.Errorf("tick %s ran %d times: %v", time.Unix(tick, 0).UTC(), len(names), names)
				}
			}
			return nil
		}}},
		Seed:   11,
		Faults: perturb.Faults{CrashAtEveryWrite: true},
	}
}

// runsOf reads the runs afresh, by tick.
func runsOf(ctx context.Context, e perturb.Env) (map[int64][]string, error) {
	l, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "run-of=nightly"})
	if err != nil {
		return nil, err
	}
	runs := map[int64][]string{}
	for _, c := range l.Items {
		tick, err := strconv.ParseInt(c.Annotations["tick"], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("run %s: tick %q: %w", c.Name, c.Annotations["tick"], err)
		}
		runs[tick] = append(runs[tick], c.Name)
	}
	return runs, nil
}

// A schedule of two hourly ticks runs in seconds on the trial's clock;
// a controller that runs a tick again after a crash between its two
// writes is found, and the one that names each run by its tick passes.
func TestCheck_findsAScheduleThatRunsATickTwiceAfterARestartAndPassesTheFix(t *testing.T) {
	findsAndPassesFix(t, "the tick run twice", "ran 2 times", tickerScenario(t, true), tickerScenario(t, false))
}

// The same schedule under API errors (409, 429, 500, timeouts, answers
// lost) given to writes the seed picks: the run created under a generated
// name whose answer was lost is created again for the same tick; the one
// named by its tick passes every error.
func TestCheck_findsARunCreatedTwiceAfterItsAnswerWasLostAndPassesTheFix(t *testing.T) {
	withErrors := func(buggy bool) perturb.Scenario {
		s := tickerScenario(t, buggy)
		s.Faults = perturb.Faults{APIErrors: 3} // seed 11: write 3 of 4 (the second tick's create) has its answer lost
		return s
	}
	findsAndPassesFix(t, "the tick run twice", "ran 2 times", withErrors(true), withErrors(false))
}
