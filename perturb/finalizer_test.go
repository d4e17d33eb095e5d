package perturb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

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

const guard = "perturb.ctrlkit.dev/external"

// externals keeps an "external resource" (a ConfigMap ext-NAME standing
// for something outside the cluster) for every owner, guarded by a
// finalizer. buggy removes the finalizer before it deletes the external
// resource: a crash between the two leaks it. The fixed one deletes first.
type externals struct {
	buggy  bool
	kube   kubernetes.Interface
	owners func(object.ObjectName) (*corev1.ConfigMap, bool)
}

func (e *externals) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	owner, ok := e.owners(name)
	if !ok {
		return controller.Result{}, nil
	}
	cms := e.kube.CoreV1().ConfigMaps(name.Namespace)
	has := slices.Contains(owner.Finalizers, guard)
	switch {
	case owner.DeletionTimestamp != nil && !has:
		return controller.Result{}, nil
	case owner.DeletionTimestamp != nil && e.buggy:
		if err := e.setFinalizers(ctx, owner, without(owner.Finalizers, guard)); err != nil {
			return controller.Result{}, err
		}
		return controller.Result{}, ignoreNotFound(cms.Delete(ctx, "ext-"+name.Name, metav1.DeleteOptions{}))
	case owner.DeletionTimestamp != nil:
		if err := ignoreNotFound(cms.Delete(ctx, "ext-"+name.Name, metav1.DeleteOptions{})); err != nil {
			return controller.Result{}, err
		}
		return controller.Result{}, e.setFinalizers(ctx, owner, without(owner.Finalizers, guard))
	case !has:
		if err := e.setFinalizers(ctx, owner, append(slices.Clone(owner.Finalizers), guard)); err != nil {
			return controller.Result{}, err
		}
	}
	ext := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ext-" + name.Name, Labels: map[string]string{"external": name.Name}}}
	if _, err := cms.Create(ctx, ext, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return controller.Result{}, err
	}
	return controller.Result{}, nil
}

// setFinalizers writes owner's finalizers, guarded by the resource version
// the reconcile read (a stale read is a conflict, retried).
func (e *externals) setFinalizers(ctx context.Context, owner *corev1.ConfigMap, fs []string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fs, "resourceVersion": owner.ResourceVersion}})
	if err != nil {
		return err
	}
	_, err = e.kube.CoreV1().ConfigMaps(owner.Namespace).Patch(ctx, owner.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func without(fs []string, f string) []string {
	return slices.DeleteFunc(slices.Clone(fs), func(x string) bool { return x == f })
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func runExternals(buggy bool) func(ctx context.Context, e perturb.Env) error {
	return runManager(func(m *manager.Manager, e perturb.Env) error {
		owners := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=owner"})
		x := &externals{buggy: buggy, kube: m.Kube(), owners: owners.Reader().Get}
		_, err := manager.NewController(m, "externals", x, manager.ControllerOptions{}, manager.For(owners))
		return err
	})
}

// state reads owners and external resources afresh.
func state(ctx context.Context, e perturb.Env) (owners, exts map[string]bool, err error) {
	l, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	owners, exts = map[string]bool{}, map[string]bool{}
	for _, c := range l.Items {
		switch {
		case c.Labels["role"] == "owner":
			owners[c.Name] = slices.Contains(c.Finalizers, guard) && c.DeletionTimestamp == nil
		case c.Labels["external"] != "":
			exts[c.Labels["external"]] = true
		}
	}
	return owners, exts, nil
}

func externalsScenario(t *testing.T, buggy bool) perturb.Scenario {
	const n, deleted = 3, 2
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run:    runExternals(buggy),
		Workload: func(ctx context.Context, e perturb.Env) error {
			cms := e.Kube.CoreV1().ConfigMaps(e.Namespace)
			for i := range n {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i),
					Labels: map[string]string{"role": "owner"}}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			if err := until(ctx, func() (bool, error) { // every owner guarded and provisioned, then some deleted
				owners, exts, err := state(ctx, e)
				return len(owners) == n && len(exts) == n && !slices.Contains(mapValues(owners), false), err
			}); err != nil {
				return err
			}
			for i := range deleted {
				if err := cms.Delete(ctx, fmt.Sprintf("owner-%d", i), metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			owners, exts, err := state(ctx, e)
			if err != nil {
				return err
			}
			if len(owners) != n-deleted {
				return fmt.Errorf("%d owners left, want %d", len(owners), n-deleted)
			}
			for o, guarded := range owners {
				if !guarded || !exts[o] {
					return fmt.Errorf("owner %s not provisioned", o)
				}
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "no external resource without its owner", Eventually: true,
			Check: func(ctx context.Context, e perturb.Env) error {
				owners, exts, err := state(ctx, e)
				if err != nil {
					return err
				}
				for x := range exts {
					if _, ok := owners[x]; !ok {
						return fmt.Errorf("the external resource of %s leaked: its owner is gone", x)
					}
				}
				return nil
			}}},
		Seed:   3,
		Faults: perturb.Faults{CrashAtEveryWrite: true},
	}
}

func mapValues(m map[string]bool) []bool {
	out := make([]bool, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestCheck_findsAFinalizerRemovedBeforeCleanupAndPassesTheFix(t *testing.T) {
	findsAndPassesFix(t, "the leak", "leaked: its owner is gone", externalsScenario(t, true), externalsScenario(t, false))
}
