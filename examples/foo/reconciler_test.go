package foo_test

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/internal/poll"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// fixture is the controller running against namespace ns.
type fixture struct {
	kube kubernetes.Interface
	foos *client.Client[*v1alpha1.Foo]
	ns   string
	ctrl *manager.Controller
}

func startController(t *testing.T) fixture {
	t.Helper()
	return startControllerOn(t, env.Get(t), installCRD)
}

// installCRD installs the generated Foo CRD.
func installCRD(ctx context.Context, cfg *rest.Config) error {
	return apiserver.InstallCRDs(ctx, cfg, config.CRDs)
}

// startControllerOn starts the controller against srv after install put
// the Foo CRD there.
func startControllerOn(t *testing.T, srv *apiserver.Server, install func(context.Context, *rest.Config) error) fixture {
	t.Helper()
	ns := srv.Namespace(t)
	cfg := srv.Config()
	if err := install(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(cfg, manager.Options{HTTPAddr: "0", AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	foos := manager.Client[*v1alpha1.Foo](m)
	ctrl, err := foo.Setup(m, ns, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	eventually(t, 30*time.Second, "caches synced", ctrl.HasSynced)
	return fixture{kube: kubernetes.NewForConfigOrDie(cfg), foos: foos, ns: ns, ctrl: ctrl}
}

func newFoo(name, dep string, n int32) *v1alpha1.Foo {
	return &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FooSpec{DeploymentName: dep, Replicas: &n}}
}

// create creates a Foo in f's namespace.
func (f fixture) create(t *testing.T, foo *v1alpha1.Foo) (*v1alpha1.Foo, error) {
	foo.Namespace = f.ns
	return f.foos.Create(t.Context(), foo, metav1.CreateOptions{})
}

// get reads the Foo called name in f's namespace.
func (f fixture) get(t *testing.T, name string) (*v1alpha1.Foo, error) {
	return f.foos.Get(t.Context(), object.ObjectName{Namespace: f.ns, Name: name})
}

// eventually polls cond against the server until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, 50*time.Millisecond, what, cond)
}

func (f fixture) deployment(t *testing.T, name string) (*appsv1.Deployment, bool) {
	d, err := f.kube.AppsV1().Deployments(f.ns).Get(t.Context(), name, metav1.GetOptions{})
	return d, err == nil
}

func TestReconciler_createsScalesRecreatesAndMirrorsStatus(t *testing.T) {
	f := startController(t)
	created, err := f.create(t, newFoo("a", "a-web", 3))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a Deployment a-web with 3 replicas owned by Foo a", func() bool {
		d, ok := f.deployment(t, "a-web")
		return ok && *d.Spec.Replicas == 3 && metav1.IsControlledBy(d, created)
	})

	// Stand-in for the missing controller-manager: the replicas become available.
	d, _ := f.deployment(t, "a-web")
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 3, 3, 3, 3
	if _, err := f.kube.AppsV1().Deployments(f.ns).UpdateStatus(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Foo a's status to mirror 3 available replicas", func() bool {
		got, err := f.get(t, "a")
		return err == nil && got.Status.AvailableReplicas == 3
	})

	got, _ := f.get(t, "a")
	five := int32(5)
	got.Spec.Replicas = &five
	if _, err := f.foos.Update(t.Context(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a-web scaled to 5", func() bool {
		d, ok := f.deployment(t, "a-web")
		return ok && *d.Spec.Replicas == 5
	})

	if err := f.kube.AppsV1().Deployments(f.ns).Delete(t.Context(), "a-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a-web re-created after its deletion", func() bool {
		d, ok := f.deployment(t, "a-web")
		return ok && d.UID != "" && *d.Spec.Replicas == 5 && d.CreationTimestamp.After(got.CreationTimestamp.Time.Add(-time.Second))
	})
}

func TestReconciler_refusesToAdoptADeploymentItDoesNotOwn(t *testing.T) {
	f := startController(t)
	foreign := foo.NewDeployment(newFoo("someone-else", "taken", 1))
	foreign.OwnerReferences = nil
	foreign.Namespace = f.ns
	if _, err := f.kube.AppsV1().Deployments(f.ns).Create(t.Context(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.create(t, newFoo("b", "taken", 4)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Foo b's status to say the Deployment is not its own", func() bool {
		got, err := f.get(t, "b")
		return err == nil && got.Status.Message != ""
	})
	eventually(t, 30*time.Second, "a Warning event "+foo.ReasonNotOwned, func() bool {
		evs, err := f.kube.CoreV1().Events(f.ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == foo.ReasonNotOwned && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "b" {
				return true
			}
		}
		return false
	})
	d, _ := f.deployment(t, "taken")
	if *d.Spec.Replicas != 1 || len(d.OwnerReferences) != 0 {
		t.Fatalf("the foreign Deployment was changed: replicas %d, owners %v", *d.Spec.Replicas, d.OwnerReferences)
	}
}

func TestCRD_refusesFoosTheControllerCannotServe(t *testing.T) {
	f := startController(t)
	for _, tc := range []struct {
		name, foo, dep, want string
	}{
		{"a name longer than a label value", strings.Repeat("n", 64), "web", "at most 63 characters"},
		{"a Deployment name that is not a DNS subdomain", "bad-dep", "Not_A_Name", "deploymentName"},
		{"no Deployment name", "no-dep", "", "deploymentName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.create(t, newFoo(tc.foo, tc.dep, 1))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create = %v, want Invalid naming %q", err, tc.want)
			}
		})
	}
	for _, n := range []int32{-1, 101} {
		_, err := f.create(t, newFoo("replicas", "replicas-web", n))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.replicas") {
			t.Fatalf("create with %d replicas = %v, want Invalid naming spec.replicas", n, err)
		}
	}
	longest := strings.Repeat("n", 63)
	if _, err := f.create(t, newFoo(longest, "longest-web", 1)); err != nil {
		t.Fatalf("a 63-character name: %v", err)
	}
	eventually(t, 30*time.Second, "the Deployment of the Foo with a 63-character name", func() bool {
		_, ok := f.deployment(t, "longest-web")
		return ok
	})
}

// installOlderCRD installs the Foo CRD without its validations, as a
// cluster may still have it from an earlier version of the sample.
func installOlderCRD(ctx context.Context, cfg *rest.Config) error {
	const file = "crd/samplecontroller.ctrlkit.dev_foos.yaml"
	data, err := fs.ReadFile(config.CRDs, file)
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return err
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	root := versions[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	delete(root, "x-kubernetes-validations")
	unstructured.RemoveNestedField(root, "properties", "spec", "properties", "deploymentName", "pattern")
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		return err
	}
	older, err := crd.MarshalJSON()
	if err != nil {
		return err
	}
	return apiserver.InstallCRDs(ctx, cfg, fstest.MapFS{file: {Data: older}})
}

func TestReconciler_aFooItCannotServeGetsAStatusMessageAndIsNotRetried(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{}) // its own server: the CRD differs
	f := startControllerOn(t, srv, installOlderCRD)
	long := strings.Repeat("n", 64)
	for _, fo := range []*v1alpha1.Foo{newFoo(long, "long-web", 1), newFoo("bad-dep", "Not_A_Name", 1)} {
		if _, err := f.create(t, fo); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{long: "no more than 63", "bad-dep": "is invalid"} {
		eventually(t, 30*time.Second, "Foo "+name+"'s status to say why it cannot be served", func() bool {
			got, err := f.get(t, name)
			return err == nil && strings.Contains(got.Status.Message, want)
		})
	}
	for _, name := range []string{long, "bad-dep"} {
		key := object.ObjectName{Namespace: f.ns, Name: name}
		eventually(t, 30*time.Second, name+" idle, with no retry pending", func() bool {
			ks := f.ctrl.KeyStats(key)
			return !ks.Queue.Queued && !ks.Queue.Processing && ks.Attempts == 0
		})
	}
	if st := f.ctrl.Stats(); st.Retries != 0 || st.Errors < 2 {
		t.Errorf("retries %d, errors %d; want no retry of the terminal errors", st.Retries, st.Errors)
	}
	if _, ok := f.deployment(t, "long-web"); ok {
		t.Error("a Deployment was created for the Foo whose name cannot be a label value")
	}
}
