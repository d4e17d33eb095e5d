package perturb_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
	"github.com/ctrlkit/ctrlkit/store"
)

// copier is a single-cluster controller run over a fleet (fleet.PerCluster):
// every ConfigMap labelled copy=true gets a Secret of the same name and
// data, written only when the cached Secret differs. global makes it check
// every cluster before it writes in its own (a List in each: "is the name
// free everywhere?"), so a cluster that is down stops the work in all.
type copier struct {
	cms     store.Reader[*corev1.ConfigMap]
	secrets store.Reader[*corev1.Secret]
	kube    kubernetes.Interface
	global  []kubernetes.Interface // with the global check: every cluster's client
}

func (c *copier) Reconcile(ctx context.Context, n object.ObjectName) (controller.Result, error) {
	cm, ok := c.cms.Get(n)
	if !ok {
		return controller.Result{}, nil
	}
	for _, kube := range c.global {
		if _, err := kube.CoreV1().ConfigMaps(n.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "copy=true"}); err != nil {
			return controller.Result{}, err
		}
	}
	want := map[string][]byte{}
	for k, v := range cm.Data {
		want[k] = []byte(v)
	}
	have, ok := c.secrets.Get(n)
	switch {
	case !ok:
		_, err := c.kube.CoreV1().Secrets(n.Namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: n.Namespace}, Data: want}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil // the cache is behind: the Secret's event comes
		}
		return controller.Result{}, err
	case !maps.EqualFunc(have.Data, want, func(a, b []byte) bool { return string(a) == string(b) }):
		s := have.DeepCopy()
		s.Data = want
		_, err := c.kube.CoreV1().Secrets(n.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		return controller.Result{}, err
	}
	return controller.Result{}, nil
}

// runCopier runs the copier over every cluster of the trial's Env.
func runCopier(global bool) func(ctx context.Context, e perturb.Env) error {
	return func(ctx context.Context, e perturb.Env) error {
		var cms *fleet.Cache[*corev1.ConfigMap]
		var secrets *fleet.Cache[*corev1.Secret]
		var all []kubernetes.Interface
		if global {
			for _, cfg := range e.Clusters {
				kube, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				all = append(all, kube)
			}
		}
		f, err := fleet.New(fleet.PerCluster(func(c *fleet.Cluster) (controller.Reconciler[object.ObjectName], error) {
			kube, err := c.Kube()
			if err != nil {
				return nil, err
			}
			cr, _ := cms.Reader(c.Name())
			sr, _ := secrets.Reader(c.Name())
			return &copier{cms: cr, secrets: sr, kube: kube, global: all}, nil
		}), fleet.Options{Controller: controller.Options[fleet.Key]{Workers: 2}})
		if err != nil {
			return err
		}
		if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: e.Namespace, LabelSelector: "copy=true"}); err != nil {
			return err
		}
		if secrets, err = fleet.Watches[*corev1.Secret](f, fleet.Scope{Namespace: e.Namespace},
			func(s *corev1.Secret) []object.ObjectName { return []object.ObjectName{object.NameOf(s)} }); err != nil {
			return err
		}
		for name, cfg := range e.Clusters {
			if err := f.Engage(name, cfg); err != nil {
				return err
			}
		}
		return f.Run(ctx)
	}
}

// clusterKube is an unperturbed client of each of e's clusters.
func clusterKube(e perturb.Env) (map[string]kubernetes.Interface, error) {
	out := map[string]kubernetes.Interface{}
	for name, cfg := range e.Clusters {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		out[name] = kube
	}
	return out, nil
}

func copierScenario(t *testing.T, global bool, clusters map[string]*rest.Config) perturb.Scenario {
	const copies = 3
	return perturb.Scenario{
		Config:   env.Get(t).Config(),
		Clusters: clusters,
		Run:      runCopier(global),
		Workload: func(ctx context.Context, e perturb.Env) error {
			kubes, err := clusterKube(e)
			if err != nil {
				return err
			}
			for round := range 4 {
				for _, kube := range kubes {
					cms := kube.CoreV1().ConfigMaps(e.Namespace)
					for i := range copies {
						name := fmt.Sprintf("cm-%d", i)
						if round == 0 {
							_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
								Labels: map[string]string{"copy": "true"}}, Data: map[string]string{"round": "0"}}, metav1.CreateOptions{})
						} else {
							_, err = cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"round":"%d"}}`, round),
								metav1.PatchOptions{})
						}
						if err != nil {
							return err
						}
					}
				}
				if err := pace(ctx, 150*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		},
		// Every cluster of e (a cluster-cut trial gives the others alone):
		// each ConfigMap has its Secret with its data.
		Settled: func(ctx context.Context, e perturb.Env) error {
			kubes, err := clusterKube(e)
			if err != nil {
				return err
			}
			var errs []error
			for name, kube := range kubes {
				cms, err := kube.CoreV1().ConfigMaps(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "copy=true"})
				if err != nil {
					return err
				}
				for _, cm := range cms.Items {
					s, err := kube.CoreV1().Secrets(e.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
					if err != nil || string(s.Data["round"]) != cm.Data["round"] {
						errs = append(errs, fmt.Errorf("cluster %s: %s not copied (round %s)", name, cm.Name, cm.Data["round"]))
					}
				}
			}
			return errors.Join(errs...)
		},
		Seed:    3,
		Faults:  perturb.Faults{ClusterCuts: 2, MaxHold: time.Second},
		Timeout: 40 * time.Second,
		Stall:   5 * time.Second,
	}
}

// A controller over a fleet whose work in every cluster waits for all of
// them (a global check before each write) fails a cluster-cut trial: the
// others do not settle while one is cut off. The same controller without
// the global check passes: the other clusters settle during the cut, and
// the cut one catches up once it is back.
func TestCheck_aClusterCutOffMustNotStopTheOthers(t *testing.T) {
	env.Get(t)         // the package's server lives on after the test
	leakcheck.Check(t) // then: the clusters' servers stop before it looks
	clusters := map[string]*rest.Config{}
	for _, name := range []string{"east", "west"} {
		srv, err := apiserver.Start(t.Context(), apiserver.Options{Progress: os.Stderr})
		if err != nil {
			t.Fatalf("the real API server is required and did not start: %v", err)
		}
		t.Cleanup(func() {
			if err := srv.Stop(); err != nil {
				t.Error(err)
			}
		})
		clusters[name] = srv.Config()
	}
	found := perturb.Check(t.Context(), copierScenario(t, true, clusters))
	t.Logf("global check: %d trials in %s, ran %v", found.Trials, found.Took.Round(time.Millisecond), found.Ran)
	if len(found.Failures) == 0 {
		t.Fatalf("the controller that waits for every cluster was not caught:\n%s", strings.Join(found.Ran, "\n"))
	}
	for _, f := range found.Failures {
		if !strings.Contains(f.Trial, "cluster cut") || !strings.Contains(f.Err.Error(), "the other clusters did not settle") {
			t.Errorf("a failure that is not the cut's:\n%v", f)
		}
	}
	t.Logf("first failure:\n%v", found.Failures[0])
	passed := perturb.Check(t.Context(), copierScenario(t, false, clusters))
	t.Logf("per cluster: %d trials in %s, ran %v", passed.Trials, passed.Took.Round(time.Millisecond), passed.Ran)
	if err := passed.Err(); err != nil {
		t.Fatalf("the controller that works per cluster failed:\n%v", err)
	}
	if passed.Trials != 3 {
		t.Errorf("%d trials, want the unperturbed one and 2 cluster cuts", passed.Trials)
	}
}
