package perturb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// registry records every owner (a Secret) in one "registry" ConfigMap, a
// read-modify-write of the ConfigMap as the cache shows it. buggy writes
// it back without the resource version it read (a blind overwrite: an
// entry added since is lost); the fixed one sends it, so a stale read is a
// conflict, retried.
type registry struct {
	buggy    bool
	kube     kubernetes.Interface
	registry func(object.ObjectName) (*corev1.ConfigMap, bool)
}

func (r *registry) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	cms := r.kube.CoreV1().ConfigMaps(name.Namespace)
	reg, ok := r.registry(object.ObjectName{Namespace: name.Namespace, Name: "registry"})
	if !ok {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
			Data: map[string]string{name.Name: "seen"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return controller.Result{RequeueAfter: 50 * time.Millisecond}, nil // the cache will show it
		}
		return controller.Result{}, err
	}
	if reg.Data[name.Name] == "seen" {
		return controller.Result{}, nil
	}
	next := reg.DeepCopy()
	if next.Data == nil {
		next.Data = map[string]string{}
	}
	next.Data[name.Name] = "seen"
	if r.buggy {
		next.ResourceVersion = "" // "last write wins"
	}
	_, err := cms.Update(ctx, next, metav1.UpdateOptions{})
	return controller.Result{}, err
}

func runRegistry(buggy bool) func(ctx context.Context, e perturb.Env) error {
	return runManager(func(m *manager.Manager, e perturb.Env) error {
		owners := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: e.Namespace})
		cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace})
		r := &registry{buggy: buggy, kube: m.Kube(), registry: cms.Reader().Get}
		_, err := manager.NewController(m, "registry", r, manager.ControllerOptions{}, manager.For(owners))
		return err
	})
}

func registryScenario(t *testing.T, buggy bool, seed uint64, faults perturb.Faults) perturb.Scenario {
	const owners = 6
	missing := func(ctx context.Context, e perturb.Env) error {
		reg, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, "registry", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var lost []string
		for i := range owners {
			if n := fmt.Sprintf("owner-%d", i); reg.Data[n] != "seen" {
				lost = append(lost, n)
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("the registry lacks %s", strings.Join(lost, ", "))
		}
		return nil
	}
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run:    runRegistry(buggy),
		// Owners come one at a time: a blind write loses nothing unless
		// the cache of the registry falls behind.
		Workload: func(ctx context.Context, e perturb.Env) error {
			for i := range owners {
				if _, err := e.Kube.CoreV1().Secrets(e.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("owner-%d", i)}}, metav1.CreateOptions{}); err != nil {
					return err
				}
				if err := pace(ctx, 150*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		},
		// A lost entry is never written again (nothing makes its owner
		// reconcile again): the controller never settles, within Timeout.
		Settled: missing,
		Timeout: 15 * time.Second,
		Seed:    seed,
		Faults:  faults,
	}
}

func TestCheck_findsAnUpdateLostInABlindReadModifyWriteAndPassesTheFix(t *testing.T) {
	faults := perturb.Faults{StaleReads: []string{"configmaps"}, MaxHold: time.Second, StaleTrials: 2}
	findsAndPassesFix(t, "the lost update", "the registry lacks", registryScenario(t, true, 11, faults), registryScenario(t, false, 11, faults))
}

// A leader paused before its write, which lands after the other replica
// took over, is the same lost update: the write is blind.
func TestCheck_findsAnUpdateLostToAPausedLeaderAndPassesTheFix(t *testing.T) {
	faults := perturb.Faults{Failovers: 2}
	findsAndPassesFix(t, "the update lost to a paused leader", "the registry lacks", registryScenario(t, true, 4, faults), registryScenario(t, false, 4, faults))
}
