package perturb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

const recorded = "perturb.ctrlkit.dev/external-name"

// provisioner gives every owner an external resource, which the external
// system names (a ConfigMap created with a generated name, standing for a
// cloud resource), and records the name in the owner: two writes. buggy
// creates one whenever the owner records none, so a crash between the two
// writes leaks the first. The fixed one tags each external resource with
// its owner's UID and, before creating, adopts one so tagged (a live
// search by tag, as cloud APIs offer).
type provisioner struct {
	buggy  bool
	kube   kubernetes.Interface
	owners func(object.ObjectName) (*corev1.ConfigMap, bool)
}

func (p *provisioner) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	owner, ok := p.owners(name)
	if !ok || owner.Annotations[recorded] != "" {
		return controller.Result{}, nil
	}
	cms := p.kube.CoreV1().ConfigMaps(name.Namespace)
	tag := "external-for=" + string(owner.UID)
	var ext string
	if !p.buggy {
		found, err := cms.List(ctx, metav1.ListOptions{LabelSelector: tag})
		if err != nil {
			return controller.Result{}, err
		}
		if len(found.Items) > 0 {
			ext = found.Items[0].Name
		}
	}
	if ext == "" {
		made, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "ext-",
			Labels: map[string]string{"external-for": string(owner.UID)}}}, metav1.CreateOptions{})
		if err != nil {
			return controller.Result{}, err
		}
		ext = made.Name
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{recorded: ext}}})
	if err != nil {
		return controller.Result{}, err
	}
	_, err = cms.Patch(ctx, owner.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return controller.Result{}, err
}

func runProvisioner(buggy bool) func(ctx context.Context, e perturb.Env) error {
	return runManager(func(m *manager.Manager, e perturb.Env) error {
		owners := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=owner"})
		p := &provisioner{buggy: buggy, kube: m.Kube(), owners: owners.Reader().Get}
		_, err := manager.NewController(m, "provisioner", p, manager.ControllerOptions{}, manager.For(owners))
		return err
	})
}

// provisioned reads afresh the external resource each owner records, and
// every external resource.
func provisioned(ctx context.Context, e perturb.Env) (records map[string]string, exts map[string]bool, err error) {
	l, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	records, exts = map[string]string{}, map[string]bool{}
	for _, c := range l.Items {
		switch {
		case c.Labels["role"] == "owner":
			records[c.Name] = c.Annotations[recorded]
		case c.Labels["external-for"] != "":
			exts[c.Name] = true
		}
	}
	return records, exts, nil
}

func provisionerScenario(t *testing.T, buggy bool) perturb.Scenario {
	const owners = 3
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run:    runProvisioner(buggy),
		Workload: func(ctx context.Context, e perturb.Env) error {
			for i := range owners {
				if _, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{"role": "owner"}}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			records, exts, err := provisioned(ctx, e)
			if err != nil {
				return err
			}
			for o, ext := range records {
				if !exts[ext] {
					return fmt.Errorf("owner %s records no existing external resource (%q)", o, ext)
				}
			}
			return nil
		},
		Invariants: []perturb.Invariant{{Name: "every external resource is recorded by its owner", Eventually: true,
			Check: func(ctx context.Context, e perturb.Env) error {
				records, exts, err := provisioned(ctx, e)
				if err != nil {
					return err
				}
				used := map[string]bool{}
				for _, ext := range records {
					used[ext] = true
				}
				for ext := range exts {
					if !used[ext] {
						return fmt.Errorf("external resource %s leaked: no owner records it", ext)
					}
				}
				return nil
			}}},
		Seed:   13,
		Faults: perturb.Faults{CrashAtEveryWrite: true},
	}
}

func TestCheck_findsAResourceLeakedByACrashBetweenCreateAndRecordAndPassesTheFix(t *testing.T) {
	findsAndPassesFix(t, "the leaked external resource", "leaked: no owner records it", provisionerScenario(t, true), provisionerScenario(t, false))
}
