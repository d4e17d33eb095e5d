package manager_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/poll"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

var env apiserver.Shared

func TestMain(m *testing.M) {
	if os.Getenv(envReplica) != "" {
		os.Exit(replicaMain())
	}
	if os.Getenv(envShardReplica) != "" {
		os.Exit(shardReplicaMain())
	}
	if os.Getenv(envMain) != "" {
		mainProcess()
		os.Exit(0)
	}
	os.Exit(env.Run(m))
}

// mirror keeps a Secret, owned by the ConfigMap, with the ConfigMap's data.
type mirror struct {
	cms   func(object.ObjectName) (*corev1.ConfigMap, bool)
	kube  kubernetes.Interface
	count atomic.Int64
}

func (r *mirror) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	r.count.Add(1)
	cm, ok := r.cms(name)
	if !ok {
		return controller.Result{}, nil
	}
	_, _, err := apply.CreateOrUpdate(ctx, apply.Clientset(r.kube.CoreV1().Secrets(cm.Namespace)), name,
		func() *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace}}
		},
		func(s *corev1.Secret) error {
			s.StringData = nil
			s.Data = map[string][]byte{}
			for k, v := range cm.Data {
				s.Data[k] = []byte(v)
			}
			return apply.SetControllerReference(cm, s, scheme.Scheme)
		})
	return controller.Result{}, err
}

// quiet is the options of a test manager: a random loopback port, logs
// to the test log.
func quiet(t *testing.T) manager.Options {
	return manager.Options{HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		AddToScheme: nil, ShutdownTimeout: 5 * time.Second}
}

// quietManager returns a manager (quiet, not started) on the package's
// API server, the server and a namespace of the test's, with the test's
// goroutines checked for leaks.
func quietManager(t *testing.T) (*manager.Manager, *apiserver.Server, string) {
	t.Helper()
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	return m, srv, ns
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start runs m until the test ends and returns the base URL of its listener.
func start(t *testing.T, m *manager.Manager) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + m.Addr(ctx)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eventually polls cond every 100ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, 100*time.Millisecond, what, cond)
}

func TestManager_runsAForAndOwnsControllerAndServesMetricsAndProbes(t *testing.T) {
	m, srv, ns := quietManager(t)
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns, LabelSelector: "mirror=true"})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	rec := &mirror{cms: cms.Reader().Get, kube: m.Kube()}
	if _, err := manager.NewController(m, "mirror", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}},
		manager.For(cms), manager.Owns(secrets)); err != nil {
		t.Fatal(err)
	}
	kube := apiserver.Client(t, srv.Config())
	for i := range 5 {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"mirror": fmt.Sprint(i < 3)}},
			Data:       map[string]string{"k": fmt.Sprint(i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	base := start(t, m)
	secret := func(name string) (*corev1.Secret, bool) {
		s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		return s, err == nil
	}
	eventually(t, 30*time.Second, "a Secret for each labelled ConfigMap", func() bool {
		_, a := secret("cm-0")
		_, b := secret("cm-1")
		_, c := secret("cm-2")
		return a && b && c
	})
	if _, ok := secret("cm-3"); ok {
		t.Error("a ConfigMap outside the label selector was mirrored")
	}
	// Owns: a Secret deleted by someone else comes back.
	if err := kube.CoreV1().Secrets(ns).Delete(t.Context(), "cm-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted Secret re-created by its owner's reconcile", func() bool {
		s, ok := secret("cm-1")
		return ok && string(s.Data["k"]) == "1" && metav1.GetControllerOf(s) != nil
	})

	if code, body := get(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	code, metrics := get(t, base+"/metrics")
	for _, want := range []string{`controller_runtime_reconcile_total{controller="mirror",result="success"}`,
		`workqueue_adds_total{controller="mirror",name="mirror"}`, "go_goroutines", "process_cpu_seconds_total"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) has no %s", code, want)
		}
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ = %d without EnablePprof, want 404", code)
	}
}

func TestManager_readyzNamesAForbiddenWatchAndTurnsReadyOnceGranted(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	user := "limited-" + ns
	cfg := rest.CopyConfig(srv.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	var logs lines
	opts := quiet(t)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	if _, err := manager.NewController(m, "reader", controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
		manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	var body string
	eventually(t, 30*time.Second, "/readyz naming the forbidden list", func() bool {
		var code int
		code, body = get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "forbidden (403)") && strings.Contains(body, `resource "configmaps"`)
	})
	t.Logf("/readyz while forbidden:\n%s", body)
	if !strings.Contains(body, "controller reader: waiting for its caches") {
		t.Errorf("/readyz does not name the waiting controller:\n%s", body)
	}
	// The start's check (sent beside the caches) names each missing verb once.
	for _, verb := range []string{"list", "watch"} {
		want := fmt.Sprintf(`permission="%s configmaps in namespace %s"`, verb, ns)
		eventually(t, 30*time.Second, "a WARN line naming "+want, func() bool { return len(logs.with(want)) == 1 })
	}
	list := manager.Permission{Verb: "list", Resource: "configmaps", Namespace: ns}
	watch := manager.Permission{Verb: "watch", Resource: "configmaps", Namespace: ns}
	limited := apiserver.Client(t, cfg)
	missing, err := manager.MissingPermissions(t.Context(), limited, []manager.Permission{watch, list, watch})
	if err != nil || !slices.Equal(missing, []manager.Permission{watch, list}) {
		t.Errorf("MissingPermissions(watch, list, watch) = %v, %v; want [watch list] in that order, once each", missing, err)
	}

	admin := apiserver.Client(t, srv.Config())
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-cms"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}}}
	if _, err := admin.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-cms"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-cms"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The reflector backs off at most 30s between attempts.
	eventually(t, 60*time.Second, "/readyz 200 once the permission is granted", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == 200
	})
	if missing, err := manager.MissingPermissions(t.Context(), limited, []manager.Permission{list, watch}); err != nil || len(missing) > 0 {
		t.Errorf("MissingPermissions once granted = %v, %v; want none", missing, err)
	}
}

func TestManager_aMissingCRDStopsOnlyItsOwnController(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	opts := quiet(t)
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	foos := manager.Informer[*v1alpha1.Foo](m, manager.Scope{Namespace: ns})
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	var fooCalls, cmCalls atomic.Int64
	count := func(n *atomic.Int64) controller.Reconciler[object.ObjectName] {
		return controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
			n.Add(1)
			return controller.Result{}, nil
		})
	}
	if _, err := manager.NewController(m, "foo", count(&fooCalls), manager.ControllerOptions{}, manager.For(foos)); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.NewController(m, "cm", count(&cmCalls), manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the ConfigMap controller reconciling", func() bool { return cmCalls.Load() > 0 })
	var code int
	var body string
	missing := func() bool {
		code, body = get(t, base+"/readyz")
		return strings.Contains(body, "does not serve kind Foo") || // discovery says so, or the list got a 404 first
			strings.Contains(body, "foos.samplecontroller.ctrlkit.dev/v1alpha1") && strings.Contains(body, "resource not found (404)")
	}
	// The Foo informer's first list may not have failed yet when the
	// ConfigMap controller already reconciled: until then it is "not synced".
	eventually(t, 30*time.Second, "/readyz naming the missing kind", missing)
	if code != 503 || !strings.Contains(body, "controller foo:") ||
		strings.Contains(body, "controller cm:") {
		t.Errorf("/readyz = %d:\n%s\nwant 503 naming the missing Foo kind and controller foo only", code, body)
	}

	if err := apiserver.InstallCRDs(t.Context(), srv.Config(), config.CRDs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeFooCRD(t, srv.Config()) }) // the server is shared: the next run must find it missing again
	eventually(t, 60*time.Second, "ready once the CRD is installed, without a restart", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == 200
	})
}

func TestManager_shutdownBoundHoldsWithAReconcileThatIgnoresItsContext(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	opts := quiet(t)
	opts.ShutdownTimeout = time.Second
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release) // after Run returned: the abandoned reconcile ends before the leak check
	var once atomic.Bool
	if _, err := manager.NewController(m, "stuck", controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) {
			if once.CompareAndSwap(false, true) {
				close(started)
			}
			<-release // ignores its context
			return controller.Result{}, nil
		}), manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-started
	begin := time.Now()
	cancel()
	select {
	case err := <-ran:
		elapsed := time.Since(begin)
		if !errors.Is(err, controller.ErrShutdownTimeout) || !strings.Contains(err.Error(), ns+"/a") {
			t.Errorf("Run = %v, want ErrShutdownTimeout naming %s/a", err, ns)
		}
		if elapsed < time.Second || elapsed > 10*time.Second {
			t.Errorf("Run returned %s after cancel; want the 1s bound plus the 1s abandon wait", elapsed)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancel although ShutdownTimeout is 1s")
	}
}

func TestManager_badInputIsAClearErrorAtStartWithNothingLeftRunning(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	noop := controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
		return controller.Result{}, nil
	})
	newManager := func(cfg *rest.Config, opts manager.Options) *manager.Manager {
		m, err := manager.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Run("a nil config", func(t *testing.T) {
		if _, err := manager.New(nil, quiet(t)); err == nil {
			t.Error("New(nil) succeeded")
		}
	})
	t.Run("a nil reconciler and a duplicate name", func(t *testing.T) {
		m := newManager(srv.Config(), quiet(t))
		cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{})
		if _, err := manager.NewController(m, "a", nil, manager.ControllerOptions{}, manager.For(cms)); !errors.Is(err, controller.ErrNilReconciler) {
			t.Errorf("nil reconciler: %v, want ErrNilReconciler", err)
		}
		if _, err := manager.NewController(m, "a", noop, manager.ControllerOptions{}, manager.For(cms)); err != nil {
			t.Fatal(err)
		}
		if _, err := manager.NewController(m, "a", noop, manager.ControllerOptions{}, manager.For(cms)); !errors.Is(err, manager.ErrDuplicateName) {
			t.Errorf("duplicate name: %v, want ErrDuplicateName", err)
		}
		if _, err := manager.NewController(m, "b", noop, manager.ControllerOptions{}, manager.Owns(cms)); err == nil ||
			!strings.Contains(err.Error(), "exactly one For") {
			t.Errorf("no For source: %v, want an error asking for exactly one For", err)
		}
	})
	t.Run("a type outside the scheme", func(t *testing.T) {
		m := newManager(srv.Config(), quiet(t))
		foos := manager.Informer[*v1alpha1.Foo](m, manager.Scope{})
		if _, err := manager.NewController(m, "foo", noop, manager.ControllerOptions{}, manager.For(foos)); err == nil ||
			!strings.Contains(err.Error(), "AddToScheme") {
			t.Errorf("NewController for an unregistered type: %v, want an error pointing at AddToScheme", err)
		}
		if err := m.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "AddToScheme") {
			t.Errorf("Run after Informer of an unregistered type: %v, want an error pointing at AddToScheme", err)
		}
	})
	t.Run("an unreachable server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		cfg := rest.CopyConfig(srv.Config())
		cfg.Host = "https://" + addr
		opts := quiet(t)
		opts.StartTimeout = 5 * time.Second
		m := newManager(cfg, opts)
		manager.Informer[*corev1.ConfigMap](m, manager.Scope{})
		err = m.Run(t.Context())
		if !errors.Is(err, manager.ErrUnreachable) || !strings.Contains(err.Error(), addr) {
			t.Errorf("Run = %v, want ErrUnreachable naming %s", err, addr)
		}
	})
	t.Run("a port already in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		opts := quiet(t)
		opts.HTTPAddr = ln.Addr().String()
		m := newManager(srv.Config(), opts)
		manager.Informer[*corev1.ConfigMap](m, manager.Scope{})
		err = m.Run(t.Context())
		if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "HTTPAddr") {
			t.Errorf("Run = %v, want an error saying the address is in use", err)
		}
		if err := m.Run(t.Context()); !errors.Is(err, manager.ErrStarted) {
			t.Errorf("second Run = %v, want ErrStarted", err)
		}
	})
}

// removeFooCRD deletes the Foo CRD and waits until the server no longer
// serves it.
func removeFooCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	removeCRD(t, cfg, "foos."+v1alpha1.GroupName)
}

// removeCRD deletes the CRD called name, if there is one, and waits until
// the server no longer has it.
func removeCRD(t *testing.T, cfg *rest.Config, name string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer utilnet.CloseIdleConnectionsFor(hc.Transport)
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ctx := context.WithoutCancel(t.Context())
	if err := dyn.Resource(crds).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the CRD "+name+" gone", func() bool {
		_, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// lines is a concurrency-safe log sink that keeps every line.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	return len(p), nil
}

// with returns the lines that contain s.
func (l *lines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.all {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// A reconcile's logger (controller.LoggerFrom) and the controller's own
// lines name the controller once (the manager and the controller both
// added the attribute, and a JSON handler wrote objects with a duplicate
// key); a reconcile's lines name its key.
func TestManager_aControllersLogLinesNameItOnce(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	var logs lines
	opts := quiet(t)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		controller.LoggerFrom(ctx).Info("reconciling")
		return controller.Result{}, nil
	})
	if _, err := manager.NewController(m, "logs", rec, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	if _, err := apiserver.Client(t, srv.Config()).CoreV1().ConfigMaps(ns).Create(t.Context(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	eventually(t, 30*time.Second, "a reconcile's log line", func() bool { return len(logs.with("msg=reconciling")) > 0 })
	for _, msg := range []string{"msg=reconciling", "caches synced"} {
		got := logs.with(msg)
		if len(got) == 0 {
			t.Errorf("no line with %s", msg)
		}
		for _, line := range got {
			if n := strings.Count(line, "controller=logs"); n != 1 {
				t.Errorf("%d times controller=logs in %q, want once", n, line)
			}
		}
	}
	for _, line := range logs.with("msg=reconciling") {
		if !strings.Contains(line, " key="+ns+"/a") {
			t.Errorf("a reconcile's line %q does not name its key %s/a", line, ns)
		}
	}
}

// A controller set up apart from the manager's Options (a Setup(m)
// function) names its field manager with KeepManagedFieldsOf after the
// informers are made: the cache then keeps that manager's entries, and
// apply.Apply sends nothing when the cached object holds the apply.
func TestManager_keepManagedFieldsOfAfterTheInformersLetsApplySkipWrites(t *testing.T) {
	m, srv, ns := quietManager(t)
	const fieldManager = "setup-keeper"
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	var applied, unchanged atomic.Int64
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		cm, ok := cms.Reader().Get(name)
		if !ok {
			return controller.Result{}, nil
		}
		cfg := corev1ac.Secret(cm.Name, cm.Namespace).WithData(map[string][]byte{"k": []byte(cm.Data["k"])}).
			WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
		_, res, err := apply.Apply(ctx, m.Kube().CoreV1().Secrets(cm.Namespace), secrets.Reader(), cfg,
			metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		switch {
		case err != nil:
		case res == apply.Unchanged:
			unchanged.Add(1)
		default:
			applied.Add(1)
		}
		return controller.Result{}, err
	})
	if _, err := manager.NewController(m, "keeper", rec, manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets)); err != nil {
		t.Fatal(err)
	}
	m.KeepManagedFieldsOf(fieldManager) // as a Setup(m) would: the informers exist already
	kube := apiserver.Client(t, srv.Config())
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	eventually(t, 30*time.Second, "the Secret applied and its own watch event reconciled", func() bool {
		s, ok := secrets.Reader().Get(object.NameOf(cm))
		return ok && len(s.ManagedFields) > 0 && unchanged.Load() > 0
	})
	s, _ := secrets.Reader().Get(object.NameOf(cm))
	for _, e := range s.ManagedFields {
		if e.Manager != fieldManager {
			t.Errorf("the cache kept the entry of %q, which nobody asked for", e.Manager)
		}
	}
	// A change to the ConfigMap that leaves the Secret as it is: reconciled,
	// and nothing written.
	before, seen := applied.Load(), unchanged.Load()
	cm.Annotations = map[string]string{"touched": "yes"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the ConfigMap's change reconciled", func() bool { return unchanged.Load() > seen })
	if got := applied.Load(); got != before || got != 1 {
		t.Errorf("%d applies sent (%d before the ConfigMap changed), want 1: the cache's entry of %s should have told Apply", got, before, fieldManager)
	}
}
