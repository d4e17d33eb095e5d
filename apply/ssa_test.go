package apply_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/internal/logctx"
	"github.com/ctrlkit/ctrlkit/object"
)

// secretCache is an informer's cache of Secrets as Apply sees it.
type secretCache map[object.ObjectName]*corev1.Secret

func (c secretCache) Get(n object.ObjectName) (*corev1.Secret, bool) { s, ok := c[n]; return s, ok }

// countingApplies counts the applies Apply sends.
type countingApplies struct {
	typedcorev1.SecretInterface
	applies int
}

func (c *countingApplies) Apply(ctx context.Context, s *corev1ac.SecretApplyConfiguration, opts metav1.ApplyOptions) (*corev1.Secret, error) {
	c.applies++
	return c.SecretInterface.Apply(ctx, s, opts)
}

// Holds answers true only when the apply would change nothing: the field
// manager's own entry names exactly the fields the configuration sets,
// with its values. Each way the apply would change the object makes it
// false.
func TestHolds_onlyWhenTheApplyWouldChangeNothing(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	owner, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	desired := func(data map[string][]byte, labels map[string]string) *corev1ac.SecretApplyConfiguration {
		return corev1ac.Secret("child", ns).WithLabels(labels).WithData(data).
			WithOwnerReferences(apply.ControllerReference(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	}
	data, labels := map[string][]byte{"a": []byte("1"), "b": []byte("2")}, map[string]string{"mirrored": "true"}
	opts := metav1.ApplyOptions{FieldManager: "mirror", Force: true}
	cur, err := kube.CoreV1().Secrets(ns).Apply(ctx, desired(data, labels), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !apply.Holds(cur, desired(data, labels), "mirror") {
		t.Fatalf("Holds on the object the same apply just wrote = false; managed fields: %s", cur.ManagedFields)
	}
	for name, c := range map[string]struct {
		obj     *corev1.Secret
		cfg     *corev1ac.SecretApplyConfiguration
		manager string
	}{
		"a value changed":        {cur, desired(map[string][]byte{"a": []byte("1"), "b": []byte("3")}, labels), "mirror"},
		"a field added":          {cur, desired(map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": nil}, labels), "mirror"},
		"a field no longer set":  {cur, desired(map[string][]byte{"a": []byte("1")}, labels), "mirror"},
		"a label no longer set":  {cur, desired(data, nil), "mirror"},
		"another field manager":  {cur, desired(data, labels), "someone-else"},
		"no managed fields":      {withoutManagedFields(cur), desired(data, labels), "mirror"},
		"a resourceVersion set":  {cur, desired(data, labels).WithResourceVersion(cur.ResourceVersion), "mirror"},
		"no field manager given": {cur, desired(data, labels), ""},
	} {
		if apply.Holds(c.obj, c.cfg, c.manager) {
			t.Errorf("%s: Holds = true, want false", name)
		}
	}
	// Another writer takes a field over: a forced apply would take it
	// back, so the object no longer holds the configuration.
	other := cur.DeepCopy()
	other.Data["a"] = []byte("theirs")
	changed, err := kube.CoreV1().Secrets(ns).Update(ctx, other, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	if err != nil {
		t.Fatal(err)
	}
	if apply.Holds(changed, desired(data, labels), "mirror") {
		t.Error("Holds after another manager changed an owned field = true")
	}
	if apply.Holds(nil, desired(data, labels), "mirror") {
		t.Error("Holds on a nil object = true")
	}
}

func withoutManagedFields(s *corev1.Secret) *corev1.Secret {
	s = s.DeepCopy()
	s.ManagedFields = nil
	return s
}

// A Deployment: associative lists (containers by name, ports by port and
// protocol) and fields the server defaults, which the manager does not own.
func TestHolds_aDeploymentAsTheServerDefaultedIt(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	desired := func(image string) *appsv1ac.DeploymentApplyConfiguration {
		labels := map[string]string{"app": "web"}
		return appsv1ac.Deployment("web", ns).WithSpec(appsv1ac.DeploymentSpec().WithReplicas(2).
			WithSelector(metav1acSelector(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().WithContainers(
				corev1ac.Container().WithName("web").WithImage(image).WithArgs("--port", "8080").
					WithPorts(corev1ac.ContainerPort().WithContainerPort(8080)),
				corev1ac.Container().WithName("sidecar").WithImage("busybox"),
			))))
	}
	opts := metav1.ApplyOptions{FieldManager: "website", Force: true}
	cur, err := kube.AppsV1().Deployments(ns).Apply(ctx, desired("nginx:1"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !apply.Holds(cur, desired("nginx:1"), "website") {
		t.Errorf("Holds on the Deployment the same apply wrote = false; managed fields: %s", cur.ManagedFields)
	}
	if apply.Holds(cur, desired("nginx:2"), "website") {
		t.Error("Holds with another image = true")
	}
}

func metav1acSelector(labels map[string]string) *metav1ac.LabelSelectorApplyConfiguration {
	return metav1ac.LabelSelector().WithMatchLabels(labels)
}

// Apply sends nothing when the cached copy holds the configuration, and
// applies when it does not (or when there is no cached copy).
func TestApply_sendsNothingWhenTheCacheHoldsTheConfiguration(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	c := &countingApplies{SecretInterface: kube.CoreV1().Secrets(ns)}
	cached := secretCache{}
	cfg := func(v string) *corev1ac.SecretApplyConfiguration {
		return corev1ac.Secret("s", ns).WithData(map[string][]byte{"k": []byte(v)})
	}
	opts := metav1.ApplyOptions{FieldManager: "ctl", Force: true}
	first, res, err := apply.Apply(ctx, c, cached, cfg("1"), opts)
	if err != nil || res != apply.Applied || c.applies != 1 {
		t.Fatalf("Apply with nothing cached = %v, %v after %d applies; want applied, 1", res, err, c.applies)
	}
	cached[object.NameOf(first)] = first // the watch delivered it
	got, res, err := apply.Apply(ctx, c, cached, cfg("1"), opts)
	if err != nil || res != apply.Unchanged || got != first || c.applies != 1 {
		t.Fatalf("Apply of what the cache holds = %v, %v after %d applies; want unchanged, the cached object, no request", res, err, c.applies)
	}
	got, res, err = apply.Apply(ctx, c, cached, cfg("2"), opts)
	if err != nil || res != apply.Applied || c.applies != 2 || string(got.Data["k"]) != "2" {
		t.Fatalf("Apply of a change = %v, %v after %d applies", res, err, c.applies)
	}

	// A cache that keeps the manager's entry but no other's: an object the
	// manager has not applied yet holds no entry, which is no reason to
	// warn (the first apply is sent, the next ones are not).
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	others := got.DeepCopy()
	others.ManagedFields = nil // only "ctl" wrote it, and this cache keeps another manager's entries
	cached[object.NameOf(got)] = others
	keeps := metav1.ApplyOptions{FieldManager: "keeps-" + ns, Force: true} // a manager of its own: the warning is once per process
	kept, res, err := apply.Apply(ctx, c, cached, cfg("2"), keeps)
	if err != nil || res != apply.Applied || c.applies != 3 {
		t.Fatalf("Apply by a new manager = %v, %v after %d applies; want applied", res, err, c.applies)
	}
	cached[object.NameOf(kept)] = kept // the watch delivered it, this manager's entry kept
	if _, res, err := apply.Apply(ctx, c, cached, cfg("2"), keeps); err != nil || res != apply.Unchanged || c.applies != 3 {
		t.Fatalf("Apply again = %v, %v after %d applies; want unchanged, no request", res, err, c.applies)
	}
	if logged.Len() > 0 {
		t.Errorf("a cache that keeps the manager's entry was warned about: %q", logged.String())
	}

	// A cache that drops the manager's entry cannot tell: every apply is
	// sent, and the reconcile's logger (its controller's, which
	// controller.LoggerFrom gives) hears why, once, as soon as the cache
	// holds an object at a version this manager's apply answered with and
	// without its entry.
	var reconcileLog bytes.Buffer
	rctx := logctx.With(ctx, slog.New(slog.NewTextHandler(&reconcileLog, nil)).With("controller", "mirror"))
	drops := metav1.ApplyOptions{FieldManager: "drops-" + ns, Force: true}
	for i := range 3 {
		sent, res, err := apply.Apply(rctx, c, cached, cfg("2"), drops)
		if err != nil || res != apply.Applied {
			t.Fatalf("Apply %d over a cache that drops the entry = %v, %v; want applied", i, res, err)
		}
		seen := sent.DeepCopy()
		seen.ManagedFields = nil // what such a cache holds once the watch delivers the apply's result
		cached[object.NameOf(sent)] = seen
	}
	if warned := reconcileLog.String(); c.applies != 6 || strings.Count(warned, "apply: the cache drops") != 1 || !strings.Contains(warned, "KeepManagedFieldsOf") ||
		!strings.Contains(warned, "drops-"+ns) || !strings.Contains(warned, "controller=mirror") {
		t.Errorf("%d applies, reconcile's log %q; want 6 and one warning naming KeepManagedFieldsOf, the manager and the controller", c.applies, warned)
	}
	if logged.Len() > 0 {
		t.Errorf("the default logger heard a warning a reconcile's logger should have: %q", logged.String())
	}

	// A configuration with a UID of its own is sent whatever the cache
	// holds (Holds does not judge a precondition): no warning, since
	// keeping the manager's entry would skip nothing.
	var uidLog bytes.Buffer
	uctx := logctx.With(ctx, slog.New(slog.NewTextHandler(&uidLog, nil)))
	own := metav1.ApplyOptions{FieldManager: "uid-" + ns, Force: true}
	for i := range 3 {
		cur := cached[object.NameOf(got)]
		sent, res, err := apply.Apply(uctx, c, cached, cfg("2").WithUID(cur.UID), own)
		if err != nil || res != apply.Applied {
			t.Fatalf("Apply %d of a configuration with its own UID = %v, %v; want applied", i, res, err)
		}
		seen := sent.DeepCopy()
		seen.ManagedFields = nil
		cached[object.NameOf(sent)] = seen
	}
	if c.applies != 9 || uidLog.Len() > 0 {
		t.Errorf("%d applies, log %q; want 9 and no warning for configurations with their own UID", c.applies, uidLog.String())
	}
}

// An apply from a cache that holds the object carries its UID: an object
// deleted since is not created again, one deleted and created anew is not
// written over (both ErrGone, nothing written), and cfg comes back as it
// was given. A field managers' conflict is not taken for a gone object.
func TestApply_neverCreatesAgainWhatTheCacheHoldsAndTheServerDeleted(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	c := kube.CoreV1().Secrets(ns)
	opts := metav1.ApplyOptions{FieldManager: "ctl", Force: true}
	cfg := corev1ac.Secret("s", ns).WithData(map[string][]byte{"k": []byte("1")})
	first, _, err := apply.Apply(ctx, c, nil, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	cached := secretCache{object.NameOf(first): first}
	if err := c.Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg.WithData(map[string][]byte{"k": []byte("2")})
	_, res, err := apply.Apply(ctx, c, cached, cfg, opts)
	if !errors.Is(err, apply.ErrGone) || !apierrors.IsConflict(err) || res != apply.Applied {
		t.Fatalf("Apply over a cached object the server deleted = %v, %v; want ErrGone wrapping the server's conflict", res, err)
	}
	if _, err := c.Get(ctx, "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the refused apply, Get = %v; want not found: the object was created again", err)
	}
	if cfg.UID != nil {
		t.Fatalf("cfg came back with uid %s: Apply must take its precondition off", *cfg.UID)
	}

	second, _, err := apply.Apply(ctx, c, nil, cfg, opts) // created anew, by someone else
	if err != nil || second.UID == first.UID {
		t.Fatalf("plain apply = %v, uid %s (the first was %s)", err, second.UID, first.UID)
	}
	cfg.WithData(map[string][]byte{"k": []byte("3")})
	if _, _, err := apply.Apply(ctx, c, cached, cfg, opts); !errors.Is(err, apply.ErrGone) || !apierrors.IsInvalid(err) {
		t.Fatalf("Apply over a cached object the server replaced = %v; want ErrGone wrapping the server's invalid uid", err)
	}
	if got, err := c.Get(ctx, "s", metav1.GetOptions{}); err != nil || string(got.Data["k"]) != "2" {
		t.Fatalf("after the refused apply the server has %v, %v; want the replacement's data untouched", got.Data, err)
	}
	cached[object.NameOf(second)] = second // the cache caught up
	if got, res, err := apply.Apply(ctx, c, cached, cfg, opts); err != nil || res != apply.Applied || string(got.Data["k"]) != "3" {
		t.Fatalf("Apply once the cache caught up = %v, %v", res, err)
	}
	// One configuration applied by two workers at once: Apply writes a copy
	// (the race detector would see a write into cfg).
	cfg.WithData(map[string][]byte{"k": []byte("4")})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { _, _, errs[i] = apply.Apply(ctx, c, cached, cfg, opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || cfg.UID != nil {
		t.Fatalf("two applies of one configuration = %v, its uid %v; want both applied, cfg untouched", err, cfg.UID)
	}

	other := metav1.ApplyOptions{FieldManager: "other", Force: true}
	owned, _, err := apply.Apply(ctx, c, nil, corev1ac.Secret("s", ns).WithData(map[string][]byte{"k": []byte("theirs")}), other)
	if err != nil {
		t.Fatal(err)
	}
	cached[object.NameOf(owned)] = owned
	_, _, err = apply.Apply(ctx, c, cached, cfg, metav1.ApplyOptions{FieldManager: "ctl"})
	if !apierrors.IsConflict(err) || errors.Is(err, apply.ErrGone) {
		t.Fatalf("Apply of a field another manager owns, not forced = %v; want the managers' conflict, not ErrGone", err)
	}
}

// Apply writes through ctrlkit's typed client as through a clientset's;
// an apply configuration of another kind than the client writes is an
// error, not a request.
func TestApply_throughTheTypedClient(t *testing.T) {
	srv := env.Get(t)
	ns, ctx := srv.Namespace(t), t.Context()
	secrets, err := client.NewForConfig[*corev1.Secret](srv.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	kube := apiserver.Client(t, srv.Config())
	opts := metav1.ApplyOptions{FieldManager: "ctl", Force: true}
	cfg := corev1ac.Secret("typed", ns).WithData(map[string][]byte{"k": []byte("1")})
	got, res, err := apply.Apply(ctx, secrets, nil, cfg, opts)
	if err != nil || res != apply.Applied || string(got.Data["k"]) != "1" {
		t.Fatalf("Apply through the typed client = %v, %v, %v", res, err, got)
	}
	cached := secretCache{object.NameOf(got): got}
	if _, res, err := apply.Apply(ctx, secrets, cached, cfg, opts); err != nil || res != apply.Unchanged {
		t.Errorf("Apply of what the cache holds = %v, %v; want unchanged", res, err)
	}
	wrong := corev1ac.ConfigMap("typed", ns)
	if _, _, err := apply.Apply(ctx, kube.CoreV1().Secrets(ns), nil, wrong, opts); err == nil || !strings.Contains(err.Error(), "ConfigMapApplyConfiguration") {
		t.Errorf("Apply of a ConfigMap's configuration through a Secrets client = %v; want an error naming it", err)
	}
}
