package perturb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// copies gives every owner (a ConfigMap labelled role=owner) a Secret of
// its name, controlled by it, and deletes the Secret when the owner is
// gone (the garbage collector's work, which the test's API server does
// not run). Users delete an owner and create it again under its name.
// buggy trusts a Secret by its name: when its cache shows the deleted
// owner as present (the deletion held back, or coalesced away by a
// relist), the Secret made for the deleted owner stays, controlled by an
// object that no longer exists. The fixed one replaces a Secret another
// owner controls.
type copies struct {
	buggy   bool
	kube    kubernetes.Interface
	owners  func(object.ObjectName) (*corev1.ConfigMap, bool)
	secrets func(object.ObjectName) (*corev1.Secret, bool)
}

func (c *copies) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	secrets := c.kube.CoreV1().Secrets(name.Namespace)
	owner, present := c.owners(name)
	s, has := c.secrets(name)
	if has && (!present || (!c.buggy && !metav1.IsControlledBy(s, owner))) {
		err := secrets.Delete(ctx, name.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) { // Conflict: another UID, already replaced
			return controller.Result{}, err
		}
		has = false
	}
	if !present || has {
		return controller.Result{}, nil
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: map[string]string{"copy": "true"}}}
	if err := apply.SetControllerReference(owner, s, scheme.Scheme); err != nil {
		return controller.Result{}, err
	}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		return controller.Result{RequeueAfter: 50 * time.Millisecond}, nil // the cache will show it
	} else if err != nil {
		return controller.Result{}, err
	}
	return controller.Result{}, nil
}

func runCopies(buggy bool) func(ctx context.Context, e perturb.Env) error {
	return runManager(func(m *manager.Manager, e perturb.Env) error {
		owners := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=owner"})
		secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "copy=true"})
		c := &copies{buggy: buggy, kube: m.Kube(), owners: owners.Reader().Get, secrets: secrets.Reader().Get}
		_, err := manager.NewController(m, "copies", c, manager.ControllerOptions{},
			manager.For(owners), manager.Owns(secrets))
		return err
	})
}

// copiesState reads, afresh, each owner's UID and the UID each Secret's
// controller reference names.
func copiesState(ctx context.Context, e perturb.Env) (owners, copies map[string]string, err error) {
	cms, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "role=owner"})
	if err != nil {
		return nil, nil, err
	}
	ss, err := e.Kube.CoreV1().Secrets(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "copy=true"})
	if err != nil {
		return nil, nil, err
	}
	owners, copies = map[string]string{}, map[string]string{}
	for _, c := range cms.Items {
		owners[c.Name] = string(c.UID)
	}
	for _, s := range ss.Items {
		if ref := metav1.GetControllerOf(&s); ref != nil {
			copies[s.Name] = string(ref.UID)
		}
	}
	return owners, copies, nil
}

func copiesScenario(t *testing.T, buggy bool) perturb.Scenario {
	const owners, rounds = 3, 6
	create := func(ctx context.Context, e perturb.Env, i int) error {
		_, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{"role": "owner"}}}, metav1.CreateOptions{})
		return err
	}
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run:    runCopies(buggy),
		Workload: func(ctx context.Context, e perturb.Env) error {
			for i := range owners {
				if err := create(ctx, e, i); err != nil {
					return err
				}
			}
			for range rounds { // each owner deleted and created again under its name
				for i := range owners {
					if err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Delete(ctx, fmt.Sprintf("owner-%d", i), metav1.DeleteOptions{}); err != nil {
						return err
					}
					if err := create(ctx, e, i); err != nil {
						return err
					}
				}
				if err := pace(ctx, 250*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			owners, copies, err := copiesState(ctx, e)
			if err != nil {
				return err
			}
			for o := range owners {
				if _, ok := copies[o]; !ok {
					return fmt.Errorf("owner %s has no Secret", o)
				}
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "each Secret is controlled by its owner as it is now", Eventually: true,
			Check: func(ctx context.Context, e perturb.Env) error {
				owners, copies, err := copiesState(ctx, e)
				if err != nil {
					return err
				}
				for name, uid := range copies {
					if owners[name] != uid {
						return fmt.Errorf("Secret %s is controlled by %s, a deleted owner (its owner now: %q)", name, uid, owners[name])
					}
				}
				return nil
			}}},
		Seed:   5,
		Faults: perturb.Faults{StaleReads: []string{"configmaps"}, Relists: []string{"configmaps"}, MaxHold: time.Second, StaleTrials: 2, RelistTrials: 2},
	}
}

func TestCheck_findsADeletedOwnerSeenAsPresentAndPassesTheFix(t *testing.T) {
	findsAndPassesFix(t, "the Secret of a deleted owner", "a deleted owner", copiesScenario(t, true), copiesScenario(t, false))
}
