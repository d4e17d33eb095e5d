package perturb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

var env apiserver.Shared

// TestMain silences klog (client-go's leader election logs through it)
// before any goroutine runs: it is process-wide.
func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	os.Exit(env.Run(m))
}

const children = 2

// pairs is a small controller: every ConfigMap labelled role=owner gets
// two Secrets labelled owner=NAME, owned by it. buggy creates the missing
// ones with generated names, counting them in its cache (a classic bug:
// a stale cache shows fewer children than exist); the fixed one names
// them NAME-0 and NAME-1, so a create the cache has not seen yet fails
// with AlreadyExists instead of adding a third.
type pairs struct {
	buggy   bool
	kube    kubernetes.Interface
	owners  func(object.ObjectName) (*corev1.ConfigMap, bool)
	secrets func(namespace string, sel labels.Selector) []*corev1.Secret
}

func (p *pairs) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	owner, ok := p.owners(name)
	if !ok {
		return controller.Result{}, nil
	}
	have := p.secrets(name.Namespace, labels.SelectorFromSet(labels.Set{"owner": name.Name}))
	for i := len(have); i < children; i++ {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Labels: map[string]string{"owner": name.Name}}}
		if p.buggy {
			s.GenerateName = name.Name + "-"
		} else {
			s.Name = fmt.Sprintf("%s-%d", name.Name, i)
		}
		if err := apply.SetControllerReference(owner, s, scheme.Scheme); err != nil {
			return controller.Result{}, err
		}
		_, err := p.kube.CoreV1().Secrets(name.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil && !(apierrors.IsAlreadyExists(err) && !p.buggy) {
			return controller.Result{}, err
		}
	}
	return controller.Result{}, nil
}

// runPairs runs the pairs controller as a program would: a manager, its
// informers and the controller, until ctx ends.
func runPairs(buggy bool) func(ctx context.Context, e perturb.Env) error {
	return runManager(func(m *manager.Manager, e perturb.Env) error {
		owners := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=owner"})
		secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: e.Namespace})
		p := &pairs{buggy: buggy, kube: m.Kube(), owners: owners.Reader().Get, secrets: secrets.Reader().List}
		_, err := manager.NewController(m, "pairs", p, manager.ControllerOptions{},
			manager.For(owners), manager.Owns(secrets))
		return err
	})
}

// childrenOf counts each owner's Secrets, from a fresh LIST.
func childrenOf(ctx context.Context, e perturb.Env) (map[string]int, error) {
	l, err := e.Kube.CoreV1().Secrets(e.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, s := range l.Items {
		out[s.Labels["owner"]]++
	}
	return out, nil
}

func pairsScenario(t *testing.T, buggy bool, seed uint64, faults perturb.Faults) perturb.Scenario {
	const owners = 4
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run:    runPairs(buggy),
		Workload: func(ctx context.Context, e perturb.Env) error {
			cms := e.Kube.CoreV1().ConfigMaps(e.Namespace)
			for i := range owners {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{"role": "owner"}}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			// Once the controller is at work (a child exists), users change
			// their objects: each change is a reconcile, which reads whatever
			// the cache holds of the children then.
			if err := until(ctx, func() (bool, error) {
				got, err := childrenOf(ctx, e)
				return len(got) > 0, err
			}); err != nil {
				return err
			}
			for round := range 10 {
				for i := range owners {
					patch := fmt.Sprintf(`{"data":{"round":"%d"}}`, round)
					if _, err := cms.Patch(ctx, fmt.Sprintf("owner-%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
						return err
					}
				}
				if err := pace(ctx, 100*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			got, err := childrenOf(ctx, e)
			if err != nil {
				return err
			}
			for i := range owners {
				if n := got[fmt.Sprintf("owner-%d", i)]; n < children {
					return fmt.Errorf("owner-%d has %d children", i, n)
				}
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "at most 2 children per owner", Check: func(ctx context.Context, e perturb.Env) error {
			got, err := childrenOf(ctx, e)
			if err != nil {
				return err
			}
			for owner, n := range got {
				if n > children {
					return fmt.Errorf("%s has %d children", owner, n)
				}
			}
			return nil
		}}},
		Seed:   seed,
		Faults: faults,
	}
}

func TestCheck_findsOverCreationOnAStaleCacheAndPassesTheFix(t *testing.T) {
	// Holds of up to 2s from the trial's start: on a loaded machine the
	// controller's first creates (after it wins its Lease) can come later
	// than a 1s hold, and the bug shows only when they are held.
	faults := perturb.Faults{StaleReads: []string{"secrets"}, MaxHold: 2 * time.Second, StaleTrials: 3}
	findsAndPassesFix(t, "the stale-cache bug", "children", pairsScenario(t, true, 7, faults), pairsScenario(t, false, 7, faults))
}

func TestCheck_aCorrectControllerSurvivesACrashAtEveryWrite(t *testing.T) {
	env.Get(t)
	leakcheck.Check(t)
	res := perturb.Check(t.Context(), pairsScenario(t, false, 1, perturb.Faults{CrashAtEveryWrite: true}))
	t.Logf("%d trials in %s", res.Trials, res.Took.Round(time.Millisecond))
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Trials < 1+children*4 {
		t.Fatalf("%d trials, want one per write (%d writes) and the unperturbed one", res.Trials, children*4)
	}
}

// runManager runs a controller as a program would: a manager that setup
// gives its informers and controllers, until ctx ends.
func runManager(setup func(m *manager.Manager, e perturb.Env) error) func(ctx context.Context, e perturb.Env) error {
	return func(ctx context.Context, e perturb.Env) error {
		m, err := newManager(e)
		if err != nil {
			return err
		}
		if err := setup(m, e); err != nil {
			return err
		}
		return m.Run(ctx)
	}
}

// until reads the cluster every 20ms until done says so (or fails), or ctx
// ends: a workload waiting for the controller.
func until(ctx context.Context, done func() (bool, error)) error {
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pace waits d, the workload's pace between two changes (not
// synchronisation), or until ctx ends.
func pace(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// newManager makes the controller's manager as a program would, quiet,
// electing a leader (as replicas in production do; the failover trials
// need it) on the trial's short timings. It leaves klog alone: klog is process-wide,
// and routing it would race with the workload's requests in the same
// process.
func newManager(e perturb.Env) (*manager.Manager, error) {
	return manager.New(e.Config, manager.Options{HTTPAddr: "0", Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: time.Second, KeepKlogOutput: true,
		LeaderElection: election.Options{Name: "controller", Namespace: e.Namespace, Identity: e.Replica,
			Timing: lease.Timing{LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod}}})
}

// findsAndPassesFix checks that Check finds the planted bug in the buggy
// controller, by a failure that says want, and that the fixed one passes
// the same trials.
func findsAndPassesFix(t *testing.T, bug, want string, buggy, fixed perturb.Scenario) {
	t.Helper()
	finds(t, bug, want, buggy)
	passes(t, fixed)
}

// finds checks that some trial of buggy fails, and that every failure says
// want.
func finds(t *testing.T, bug, want string, buggy perturb.Scenario) {
	t.Helper()
	env.Get(t)
	leakcheck.Check(t)
	found := perturb.Check(t.Context(), buggy)
	t.Logf("buggy controller: %d trials in %s, %d failures", found.Trials, found.Took.Round(time.Millisecond), len(found.Failures))
	if len(found.Failures) == 0 {
		t.Fatalf("%s was not found by:\n%s", bug, strings.Join(found.Ran, "\n"))
	}
	for _, f := range found.Failures {
		if !strings.Contains(f.Err.Error(), want) {
			t.Errorf("%s: a failure that does not say %q:\n%v", bug, want, f)
		}
	}
	for _, f := range found.Failures {
		t.Logf("found by %s, after %s", f.Trial, f.After.Round(time.Millisecond))
	}
	t.Logf("first failure:\n%v", found.Failures[0])
}

// passes checks that every trial of fixed passes.
func passes(t *testing.T, fixed perturb.Scenario) {
	t.Helper()
	env.Get(t)
	leakcheck.Check(t)
	passed := perturb.Check(t.Context(), fixed)
	t.Logf("fixed controller: %d trials in %s", passed.Trials, passed.Took.Round(time.Millisecond))
	if err := passed.Err(); err != nil {
		t.Fatalf("the fixed controller failed:\n%v", err)
	}
}

// A correct controller passes every kind of perturbation, whatever the
// seed: 3 seeds in make test, $CTRLKIT_PERTURB_SEEDS when set (the long
// form).
func TestCheck_aCorrectControllerPassesAcrossSeeds(t *testing.T) {
	env.Get(t)
	leakcheck.Check(t)
	seeds := 3
	if v := os.Getenv("CTRLKIT_PERTURB_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CTRLKIT_PERTURB_SEEDS=%q: want a count of seeds", v)
		}
		seeds = n
	}
	faults := perturb.Faults{StaleReads: []string{"secrets", "configmaps"}, Relists: []string{"secrets", "configmaps"},
		MaxHold: time.Second, StaleTrials: 1, RelistTrials: 1, Failovers: 1}
	for seed := uint64(100); seed < 100+uint64(seeds); seed++ {
		res := perturb.Check(t.Context(), pairsScenario(t, false, seed, faults))
		t.Logf("seed %d: %d trials in %s", seed, res.Trials, res.Took.Round(time.Millisecond))
		if err := res.Err(); err != nil {
			t.Fatal(err)
		}
		if res.Trials != 4 {
			t.Fatalf("seed %d: %d trials, want 4 (unperturbed, stale reads, relists, failover)", seed, res.Trials)
		}
	}
}

// A controller that stops short of what Settled asks fails as stuck once it
// has made no write for Stall, not at the trial's Timeout.
func TestCheck_aStuckControllerFailsAtStallNotAtTimeout(t *testing.T) {
	s := pairsScenario(t, false, 1, perturb.Faults{})
	s.Settled = func(ctx context.Context, e perturb.Env) error {
		got, err := childrenOf(ctx, e)
		if err != nil {
			return err
		}
		n := 0
		for _, c := range got {
			n += c
		}
		return fmt.Errorf("%d children of %d owners, want three each (the controller makes two)", n, len(got))
	}
	s.Timeout, s.Stall = 60*time.Second, 3*time.Second
	res := perturb.Check(t.Context(), s)
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "stuck") ||
		!strings.Contains(res.Failures[0].Err.Error(), "want three each") {
		t.Fatalf("failures %v, want one: stuck, naming Settled's error", res.Failures)
	}
	t.Logf("failed after %s: %v", res.Took.Round(time.Millisecond), res.Failures[0].Err)
	if res.Took > 30*time.Second {
		t.Errorf("the stuck trial took %s, want it to fail soon after its 3s Stall (Timeout 60s)", res.Took)
	}
}

// Writes the workload makes through a client of its Env's Config (a typed
// client of a custom resource is built that way) are listed in a
// failure's writes as the test's, beside Kube's: the Config given to the
// workload is unperturbed and recorded; Run's goes through the
// perturbations and is listed as the controller's.
func TestCheck_aFailureListsTheWorkloadsWritesThroughItsConfig(t *testing.T) {
	s := pairsScenario(t, false, 1, perturb.Faults{})
	workload := s.Workload
	s.Workload = func(ctx context.Context, e perturb.Env) error {
		kube, err := kubernetes.NewForConfig(e.Config)
		if err != nil {
			return err
		}
		if _, err := kube.CoreV1().ConfigMaps(e.Namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "through-config"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		return workload(ctx, e)
	}
	s.Settled = func(context.Context, perturb.Env) error { return errors.New("never settles") }
	s.Timeout, s.Stall = 60*time.Second, 3*time.Second
	res := perturb.Check(t.Context(), s)
	if len(res.Failures) != 1 {
		t.Fatalf("failures %v, want one", res.Failures)
	}
	var test, controller int
	for _, w := range res.Failures[0].History {
		switch {
		case w.Test && w.Method == http.MethodPost && strings.HasSuffix(w.Path, "/configmaps"):
			test++ // the workload's creates: through-config and the four owners through Kube
		case !w.Test && w.Method != "":
			controller++
		}
	}
	if test != 5 || controller == 0 {
		t.Errorf("%d creates of the test and %d writes of the controller in the failure's writes, want 5 and some:\n%v",
			test, controller, res.Failures[0])
	}
}
