package perturb_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// grace is how long a node must have been not ready for the fixed drainer
// to drain it.
const grace = 30 * time.Second

// drainer drains a node (a ConfigMap labelled role=node, its data "ready"
// and, since when, "since" in Unix seconds) that is not ready: it deletes
// the pods on it (ConfigMaps labelled on=NODE). A node that restarts is
// not ready for a moment, an intermediate state. buggy drains on any "not
// ready" it reads; the fixed one only once the node has been not ready for
// the grace period, by its clock (the trial's in a test), and reads the
// node again when that has passed.
type drainer struct {
	buggy bool
	kube  kubernetes.Interface
	nodes func(object.ObjectName) (*corev1.ConfigMap, bool)
	now   func() time.Time
}

func (d *drainer) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	node, ok := d.nodes(name)
	if !ok || node.Data["ready"] != "false" {
		return controller.Result{}, nil
	}
	if !d.buggy {
		unix, err := strconv.ParseInt(node.Data["since"], 10, 64)
		if err != nil {
			return controller.Result{}, fmt.Errorf("node %s: since %q: %w", name.Name, node.Data["since"], err)
		}
		if left := time.Unix(unix, 0).Add(grace).Sub(d.now()); left > 0 {
			return controller.Result{RequeueAfter: left}, nil
		}
	}
	err := d.kube.CoreV1().ConfigMaps(name.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: labels.Set{"on": name.Name}.String()})
	return controller.Result{}, err
}

func drainerScenario(t *testing.T, buggy bool) perturb.Scenario {
	const pods = 2
	podsOn := func(ctx context.Context, e perturb.Env) (int, error) {
		l, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "on=n1"})
		if err != nil {
			return 0, err
		}
		return len(l.Items), nil
	}
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run: runManager(func(m *manager.Manager, e perturb.Env) error {
			nodes := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=node"})
			d := &drainer{buggy: buggy, kube: m.Kube(), nodes: nodes.Reader().Get, now: e.Clock.Now}
			_, err := manager.NewController(m, "drainer", d, manager.ControllerOptions{
				Options: controller.Options[object.ObjectName]{Clock: e.Clock}}, manager.For(nodes))
			return err
		}),
		Workload: func(ctx context.Context, e perturb.Env) error {
			cms := e.Kube.CoreV1().ConfigMaps(e.Namespace)
			node, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "n1",
				Labels: map[string]string{"role": "node"}}, Data: map[string]string{"ready": "true"}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			for i := range pods {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i),
					Labels: map[string]string{"on": "n1"}}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			if err := pace(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			// The node restarts: not ready, and ready again at once.
			for _, ready := range []string{"false", "true"} {
				node.Data = map[string]string{"ready": ready, "since": strconv.FormatInt(e.Clock.Now().Unix(), 10)}
				if node, err = cms.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			node, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n, err := podsOn(ctx, e); err != nil || node.Data["ready"] != "true" || n != pods {
				return fmt.Errorf("node ready %q with %d pods (%v); want true with %d", node.Data["ready"], n, err, pods)
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "a ready node is never drained", Check: func(ctx context.Context, e perturb.Env) error {
			node, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, "n1", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			n, perr := podsOn(ctx, e)
			if err != nil || perr != nil {
				return nil // a read that failed proves nothing
			}
			if _, restarted := node.Data["since"]; restarted && node.Data["ready"] == "true" && n < pods {
				return fmt.Errorf("node n1 is ready and was drained: %d pods of %d left", n, pods)
			}
			return nil
		}}},
		Seed: 4,
		Faults: perturb.Faults{MaxHold: time.Second, Moments: []perturb.Moment{{
			Name: "a node is not ready",
			Watch: func(ctx context.Context, e perturb.Env) (watch.Interface, error) {
				return e.Kube.CoreV1().ConfigMaps(e.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: "role=node"})
			},
			When: func(ev watch.Event) bool {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				return ok && cm.Data["ready"] == "false"
			},
			Stale: []string{"configmaps"},
		}}},
	}
}

// A controller that acts on a condition it read in an intermediate state
// (a node not ready for the moment of its restart) is found: the moment
// lasts a round trip to the server, long enough that the unperturbed
// trial already catches it here. The one that waits a grace period on its
// clock passes, held at that moment too.
func TestCheck_findsActingOnAnIntermediateStateAndPassesTheFix(t *testing.T) {
	findsAndPassesFix(t, "a drain on a restart's moment", "was drained", drainerScenario(t, true), drainerScenario(t, false))
}
