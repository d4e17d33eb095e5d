package manager_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	gadgetv1 "github.com/ctrlkit/ctrlkit/internal/testapi/v1"
	gadgetv2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// envMain makes the test binary a program whose main is manager.Main
// (mainProcess): "run" adds a runnable that prints --greeting and waits,
// "fail-setup" fails in setup.
const envMain = "CTRLKIT_TEST_MAIN"

func mainProcess() {
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError) // the testing flags are not this program's
	greeting := flag.String("greeting", "running", "what to print once running")
	if os.Getenv(envMain) == "mirror" {
		manager.Main(manager.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), Permissions: mirrorPermissions,
			Informers:   informer.FactoryOptions{KeepManagedFieldsOf: []string{"mirror"}},
			Webhook:     webhook.Options{Name: os.Getenv(envWebhookName)},
			AddToScheme: []func(*runtime.Scheme) error{testapi.AddToScheme}, CRDs: testapi.CRDs}, setupMirror)
		return
	}
	if os.Getenv(envMain) == "validating-only" {
		manager.Main(manager.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			Webhook: webhook.Options{Name: os.Getenv(envWebhookName)}}, func(m *manager.Manager) error {
			return webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
				Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
					if _, ok := cm.Data["reject"]; ok { // not "forbidden": the test looks for that word in the log
						return nil, field.Forbidden(field.NewPath("data").Key("reject"), "refused by the validating-only program")
					}
					return nil, nil
				}})
		})
		return
	}
	manager.Main(manager.Options{Logger: slog.New(slog.DiscardHandler)}, func(m *manager.Manager) error {
		switch os.Getenv(envMain) {
		case "fail-setup":
			return errors.New("setup refused")
		case "webhooks":
			return errors.Join(
				webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
					Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
						if _, ok := cm.Data["reject"]; ok {
							return nil, errors.New("refused by the program's webhook")
						}
						return nil, nil
					}}),
				webhook.AddDefaulter(m.Webhooks(), func(context.Context, *corev1.Secret) error { return nil }))
		}
		return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
			fmt.Println(*greeting)
			<-ctx.Done()
			return nil
		}))
	})
}

func TestManagerMain_runsUntilSIGTERMThenExitsCleanly(t *testing.T) {
	srv := env.Get(t)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "--kubeconfig", srv.Kubeconfig(), "--http-addr", "0",
		"--greeting", "hello from main")
	cmd.Env = append(os.Environ(), envMain+"=run")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "hello from main\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("first line = %q, %v; want the greeting (stderr: %s)", line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit status 0 (stderr: %s)", err, stderr.String())
	}
}

// --webhook-local, for an API server on the same machine: the program
// serves its webhooks on loopback with a certificate of its own, installs
// their configurations pointing there, and removes them when it exits.
func TestManagerMain_webhookLocalServesAndInstallsItsWebhooks(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{}) // its own: the configurations are cluster-wide
	kube := apiserver.Client(t, srv.Config())
	cmd := exec.CommandContext(t.Context(), os.Args[0], "--kubeconfig", srv.Kubeconfig(), "--http-addr", "0", "--webhook-local")
	cmd.Env = append(os.Environ(), envMain+"=webhooks")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	create := func(name string, data map[string]string) error {
		_, err := kube.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		err := create(fmt.Sprint("probe-", i), map[string]string{"reject": "x"})
		if err != nil && strings.Contains(err.Error(), "refused by the program's webhook") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program's validating webhook did not answer within 60s: last create: %v (stderr: %s)", err, stderr.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("the program exited: %v (stderr: %s)", err, stderr.String())
		case <-time.After(100 * time.Millisecond): // polling the API server, which reaches the webhook once installed
		}
	}
	if err := create("allowed", map[string]string{"k": "v"}); err != nil {
		t.Errorf("a ConfigMap the webhook allows: %v", err)
	}
	// Served on loopback only, under configurations of their own.
	installed, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(installed.Items) != 1 {
		t.Errorf("%d validating configurations while the program runs; want its one", len(installed.Items))
	}
	for _, c := range installed.Items {
		for _, w := range c.Webhooks {
			if u := w.ClientConfig.URL; !strings.HasSuffix(c.Name, "-local-validating") || u == nil || !strings.HasPrefix(*u, "https://127.0.0.1:") {
				t.Errorf("configuration %s calls %v; want NAME-local-validating calling https://127.0.0.1:PORT", c.Name, u)
			}
			if strings.HasPrefix(w.Name, "canary.") {
				continue // matches only its own labelled ConfigMap
			}
			// Left behind by a run killed, it must not stop the cluster's writes.
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore ||
				w.NamespaceSelector == nil || !strings.Contains(w.NamespaceSelector.String(), "kube-system") {
				t.Errorf("webhook %s: failurePolicy %v, namespaceSelector %v; want Ignore, kube-system left out", w.Name,
					w.FailurePolicy, w.NamespaceSelector)
			}
		}
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil { // a terminal closed
		t.Fatal(err)
	}
	stopped = true
	if err := <-exited; err != nil {
		t.Fatalf("after SIGHUP: %v, want exit status 0 (stderr: %s)", err, stderr.String())
	}
	vs, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Items) != 0 || len(ms.Items) != 0 {
		t.Errorf("after the program exited: %d validating and %d mutating configurations; want none", len(vs.Items), len(ms.Items))
	}
	if err := create("after-exit", map[string]string{"reject": "x"}); err != nil {
		t.Errorf("a create after the program exited: %v; want no webhook in the way", err)
	}
}

func TestManagerMain_exitsWithStatus1AndTheReason(t *testing.T) {
	missing := t.TempDir() + "/no-such-kubeconfig"
	for _, tc := range []struct{ mode, kubeconfig, want string }{
		{"run", missing, "no-such-kubeconfig"},
		{"fail-setup", env.Get(t).Kubeconfig(), "setup refused"},
	} {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "--kubeconfig", tc.kubeconfig, "--http-addr", "0")
		cmd.Env = append(os.Environ(), envMain+"="+tc.mode)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s with kubeconfig %s: %v, output %q; want exit status 1 naming %q", tc.mode, tc.kubeconfig, err, out, tc.want)
		}
	}
}

func TestManagerMain_printsTheWebhookManifestsWithoutACluster(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "--kubeconfig", t.TempDir()+"/none", "--webhook-manifests=ops/hooks")
	cmd.Env = append(os.Environ(), envMain+"=webhooks")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v (stderr: %s)", err, stderr.String())
	}
	var docs []map[string]any
	for _, doc := range strings.Split(string(out), "---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v in\n%s", err, out)
		}
		docs = append(docs, m)
	}
	if len(docs) != 2 || docs[0]["kind"] != "MutatingWebhookConfiguration" || docs[1]["kind"] != "ValidatingWebhookConfiguration" {
		t.Fatalf("printed:\n%s", out)
	}
	for _, want := range []string{"path: /mutate--v1-secret", "path: /validate--v1-configmap", "namespace: ops", "name: hooks",
		"- secrets", "- configmaps", "failurePolicy: Fail", "sideEffects: None"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("printed manifests lack %q:\n%s", want, out)
		}
	}
}

// envWebhookName names the "mirror" program's webhook configurations.
const envWebhookName = "CTRLKIT_TEST_WEBHOOK_NAME"

// mirrorPermissions are what the "mirror" program writes: Secrets, by
// server-side apply.
var mirrorPermissions = []manager.Permission{{Verb: "create", Resource: "secrets"}, {Verb: "patch", Resource: "secrets"}}

// setupMirror adds the "mirror" program's controller: a Secret beside
// every ConfigMap labelled manifest-test=true, owned by it; and its
// webhooks: ConfigMaps with a "forbidden" key are refused, others get a
// "defaulted" label; Gadgets convert between v1 and v2 (the hub), and each
// version refuses an image of its own.
func setupMirror(m *manager.Manager) error {
	err := errors.Join(
		webhook.AddConversion[*gadgetv2.Gadget](m.Webhooks(), &gadgetv1.Gadget{}),
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*gadgetv1.Gadget]{
			Create: func(_ context.Context, g *gadgetv1.Gadget) (webhook.Warnings, error) {
				if g.Spec.Image == "bad:v1" {
					return nil, field.Invalid(field.NewPath("spec", "image"), g.Spec.Image, "refused by v1's webhook")
				}
				return nil, nil
			}}),
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*gadgetv2.Gadget]{
			Create: func(_ context.Context, g *gadgetv2.Gadget) (webhook.Warnings, error) {
				if g.Spec.Container.Image == "bad:v2" {
					return nil, field.Invalid(field.NewPath("spec", "container", "image"), g.Spec.Container.Image, "refused by v2's webhook")
				}
				return nil, nil
			}}),
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
			Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
				if _, ok := cm.Data["forbidden"]; ok {
					return nil, field.Forbidden(field.NewPath("data").Key("forbidden"), "refused by the mirror's webhook")
				}
				return nil, nil
			}}),
		webhook.AddDefaulter(m.Webhooks(), func(_ context.Context, cm *corev1.ConfigMap) error {
			metav1.SetMetaDataLabel(&cm.ObjectMeta, "defaulted", "by-the-mirror")
			return nil
		}))
	if err != nil {
		return err
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{LabelSelector: "manifest-test=true"})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{LabelSelector: "manifest-test-mirror=true"})
	kube := m.Kube()
	_, err = manager.NewController(m, "mirror", controller.ReconcileFunc[object.ObjectName](
		func(ctx context.Context, n object.ObjectName) (controller.Result, error) {
			cm, ok := cms.Reader().Get(n)
			if !ok {
				return controller.Result{}, nil
			}
			s := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"manifest-test-mirror": "true"}).
				WithStringData(cm.Data).WithOwnerReferences(apply.ControllerReference(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
			_, _, err := apply.Apply(ctx, kube.CoreV1().Secrets(cm.Namespace), secrets.Reader(), s,
				metav1.ApplyOptions{FieldManager: "mirror", Force: true})
			return controller.Result{}, err
		}), manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets))
	return err
}

// The done-when of a program shipped from its own manifests: they are
// printed without a cluster, applied as they are (server-side apply,
// every document accepted), and the program, run with the Deployment's
// arguments as the generated ServiceAccount (a token from the
// TokenRequest API, nothing else), converges; with one rule taken out of
// the generated ClusterRole it names the missing permission.
func TestManagerMain_runsAsItsOwnManifestsSay(t *testing.T) {
	srv := env.Get(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	name := fmt.Sprintf("manifest-test-%d", time.Now().UnixNano()%1_000_000)
	ns := name + "-system"
	out := printManifests(t, "mirror", name, "--manifests-image", "example.com/mirror:v1", "--manifests-namespace", ns,
		"--manifests-replicas", "2")
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name+"-validating", metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name+"-mutating", metav1.DeleteOptions{})
		_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = exec.Command("kubectl", "--kubeconfig", srv.Kubeconfig(), "delete", "crd", "gadgets.gadgets.webhook.ctrlkit.test",
			"--wait=false").Run()
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name+"-ca-bundle-only", metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name+"-ca-bundle-only", metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
	})

	kinds, deployArgs := manifestKinds(t, out)
	if want := "Namespace CustomResourceDefinition ServiceAccount ClusterRole ClusterRoleBinding ClusterRole Role RoleBinding Deployment PodDisruptionBudget Service " +
		"MutatingWebhookConfiguration ValidatingWebhookConfiguration ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding"; strings.Join(kinds, " ") != want {
		t.Fatalf("kinds %q, want %q:\n%s", kinds, want, out)
	}
	// This API server cannot reach a Service: the webhook configurations
	// are pointed at the program's listener by URL instead, and kept to
	// the test's namespace (the server is shared). All else is as printed.
	webhookAddr := freeAddr(t)
	out = webhooksByURL(t, out, "https://"+webhookAddr, ns)
	for _, want := range []string{"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
		"type: RuntimeDefault", "path: /readyz", "path: /healthz", "image: example.com/mirror:v1", "- --leader-elect", "replicas: 2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the manifests lack %q", want)
		}
	}
	applyManifests(t, srv, out)

	// The program as its Pod runs it: the ServiceAccount's token, the
	// Deployment's arguments (the addresses and cache folder made local).
	kubeconfig := srv.KubeconfigAs(t, ns, name)
	metricsAddr := freeAddr(t)
	args := append(deployArgs, "--kubeconfig", kubeconfig,
		"--health-addr", "127.0.0.1:0", "--http-addr", "0", "--cache-dir", t.TempDir(), "--metrics-addr", metricsAddr,
		"--webhook-addr", webhookAddr, "--webhook-cert-hosts", "127.0.0.1")
	run := func(t *testing.T) (logs func() string, stop func()) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
		cmd.Env = append(os.Environ(), envMain+"=mirror", envWebhookName+"="+name)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return stderr.String, func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}

	logs, stop := run(t)
	// Its webhooks, called by the API server once the program made its
	// certificate Secret and wrote the authority into the configurations:
	// a refusal naming the field, a default.
	waitUntil(t, time.Minute, "the webhook's refusal", func() bool {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused"},
			Data: map[string]string{"forbidden": "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "data[forbidden]: Forbidden: refused by the mirror's webhook")
	}, logs)
	// The ServiceAccount wrote the authority into the configurations
	// (the refusal above); the policy in the manifests lets it change
	// nothing else of them, though its role grants update.
	saCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	asProgram := kubernetes.NewForConfigOrDie(saCfg)
	vwc, err := asProgram.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name+"-validating", metav1.GetOptions{})
	if err != nil || len(vwc.Webhooks) == 0 || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("the validating configuration as the program reads it: %v (%v)", err, vwc)
	}
	ignore := admissionregistrationv1.Ignore
	vwc.Webhooks[0].FailurePolicy = &ignore
	vwc.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}} // admitted or not, nothing changes
	// The API server takes a moment to load a policy it was just given.
	waitUntil(t, time.Minute, "the policy's denial of a change to the program's webhook", func() bool {
		_, err := asProgram.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(t.Context(), vwc, dry)
		return err != nil && strings.Contains(err.Error(), "may change the caBundle of its webhook configurations, nothing else")
	}, logs)
	vwc, err = asProgram.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name+"-validating", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vwc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "gone", UID: "4b3c0000-0000-0000-0000-000000000000"}}
	if _, err := asProgram.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(t.Context(), vwc, dry); err == nil ||
		!strings.Contains(err.Error(), "nothing else") {
		t.Errorf("the program's ServiceAccount giving its webhook configuration a gone owner (the collector would delete it): %v, "+
			"want the policy's denial", err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dynamic.NewForConfigOrDie(saCfg).Resource(crds).Patch(t.Context(), "gadgets.gadgets.webhook.ctrlkit.test",
		types.MergePatchType, []byte(`{"spec":{"names":{"shortNames":["gdg"]}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err == nil ||
		!strings.Contains(err.Error(), "may change the caBundle of its CRDs' conversion webhooks, nothing else") {
		t.Errorf("the program's ServiceAccount changing its CRD's names: %v, want the policy's denial", err)
	}
	plain, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		metav1.CreateOptions{})
	if err != nil || plain.Labels["defaulted"] != "by-the-mirror" {
		t.Fatalf("a plain ConfigMap: %v, labels %v; want the webhook's default", err, plain.Labels)
	}
	// Gadgets in two versions: a v1 create converted by the program to the
	// stored v2 and read back in both; each version's own webhook.
	gadgets := dynamic.NewForConfigOrDie(srv.Config())
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "gadgets.webhook.ctrlkit.test", Version: v, Resource: "gadgets"}
	}
	gadget := func(v, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gadgets.webhook.ctrlkit.test/" + v,
			"kind": "Gadget", "metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	}
	waitUntil(t, time.Minute, "a v1 Gadget stored through the program's conversion", func() bool {
		_, err := gadgets.Resource(gvr("v1")).Namespace(ns).Create(t.Context(),
			gadget("v1", "g", map[string]any{"image": "nginx:1.27", "replicas": int64(2)}), metav1.CreateOptions{})
		return err == nil
	}, logs)
	if g, err := gadgets.Resource(gvr("v2")).Namespace(ns).Get(t.Context(), "g", metav1.GetOptions{}); err != nil ||
		fmt.Sprint(g.Object["spec"]) != "map[container:map[image:nginx:1.27] replicas:2]" {
		t.Errorf("the v1 Gadget read as v2: %v, %v", err, g)
	}
	if _, err := gadgets.Resource(gvr("v1")).Namespace(ns).Create(t.Context(), gadget("v1", "bad1",
		map[string]any{"image": "bad:v1"}), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.image: Invalid value") {
		t.Errorf("a bad v1 Gadget: %v, want v1's webhook refusing spec.image", err)
	}
	if _, err := gadgets.Resource(gvr("v2")).Namespace(ns).Create(t.Context(), gadget("v2", "bad2",
		map[string]any{"container": map[string]any{"image": "bad:v2"}}), metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.container.image: Invalid value") {
		t.Errorf("a bad v2 Gadget: %v, want v2's webhook refusing spec.container.image", err)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "source", Namespace: ns,
		Labels: map[string]string{"manifest-test": "true"}}, Data: map[string]string{"k": "v"}}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the Secret written by the program as its ServiceAccount", func() bool {
		s, err := admin.CoreV1().Secrets(ns).Get(t.Context(), "source", metav1.GetOptions{})
		return err == nil && string(s.Data["k"]) == "v"
	}, logs)
	if l := logs(); strings.Contains(l, "missing RBAC permission") || strings.Contains(l, "forbidden") || strings.Contains(l, "writing no snapshot") {
		t.Errorf("the program lacked a permission with the generated RBAC:\n%s", l)
	}

	// Its metrics, over HTTPS: 401 without a token, 403 for a
	// ServiceAccount not bound to NAME-metrics-reader, 200 for one that is.
	for _, sa := range []string{"nobody", "scraper"} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name+"-scraper", metav1.DeleteOptions{})
	})
	tokenOf := func(sa string) string {
		tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Status.Token
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{{"no token", "", 401}, {"a token the API server never issued", "made-up", 401},
		{"nobody", tokenOf("nobody"), 403}, {"scraper", tokenOf("scraper"), 200}} {
		code, body := getMetrics(t, metricsAddr, tc.token)
		if code != tc.want || (code == 200 && !strings.Contains(body, "controller_runtime_reconcile_total")) {
			t.Errorf("/metrics for %s: %d, want %d (body %.200q)", tc.who, code, tc.want, body)
		}
	}
	stop()

	// One rule out: the program names the permission it lacks.
	role, err := admin.RbacV1().ClusterRoles().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if len(r.Resources) == 1 && r.Resources[0] == "secrets" {
			r.Verbs = slicesWithout(r.Verbs, "patch")
		}
		kept = append(kept, r)
	}
	role.Rules = kept
	if _, err := admin.RbacV1().ClusterRoles().Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs, stop = run(t)
	defer stop()
	waitUntil(t, time.Minute, "the program naming the permission taken out", func() bool {
		return strings.Contains(logs(), "permission=\"patch secrets in every namespace\"")
	}, logs)
}

// A program with validating webhooks only, run from its own manifests as
// its ServiceAccount: the role grants nothing on mutating configurations
// (TestManifests_followWhatTheProgramRegistered), and the program needs
// nothing there: it writes its authority into its validating
// configuration, and logs no refusal of the API server (a watch or a write
// of a configuration it has not, which the role no longer grants, would).
func TestManagerMain_aValidatingOnlyProgramRunsAsItsOwnManifestsSay(t *testing.T) {
	srv := env.Get(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	name := fmt.Sprintf("validating-only-%d", time.Now().UnixNano()%1_000_000)
	ns := name + "-system"
	out := printManifests(t, "validating-only", name, "--manifests-image", "example.com/validating:v1", "--manifests-namespace", ns)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name+"-validating", metav1.DeleteOptions{})
		_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name+"-ca-bundle-only", metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name+"-ca-bundle-only", metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
	})
	if strings.Contains(string(out), "MutatingWebhookConfiguration") || strings.Contains(string(out), name+"-mutating") {
		t.Fatalf("the manifests of a validating-only program name a mutating configuration:\n%s", out)
	}
	_, deployArgs := manifestKinds(t, out)
	webhookAddr := freeAddr(t)
	applyManifests(t, srv, webhooksByURL(t, out, "https://"+webhookAddr, ns))

	args := append(deployArgs, "--kubeconfig", srv.KubeconfigAs(t, ns, name),
		"--health-addr", "127.0.0.1:0", "--http-addr", "0", "--cache-dir", t.TempDir(), "--metrics-addr", freeAddr(t),
		"--webhook-addr", webhookAddr, "--webhook-cert-hosts", "127.0.0.1")
	run := exec.CommandContext(t.Context(), os.Args[0], args...)
	run.Env = append(os.Environ(), envMain+"=validating-only", envWebhookName+"="+name)
	var logs syncBuffer
	run.Stderr = &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		_ = run.Wait()
	}()
	waitUntil(t, time.Minute, "the webhook's refusal", func() bool {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused"},
			Data: map[string]string{"reject": "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "refused by the validating-only program")
	}, logs.String)
	// A request of the program's that the role refuses is logged when it
	// fails; by the refusal above it has listed, watched and written what
	// it keeps. One more round trip of the webhook, then the log is read.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "admitted"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("a ConfigMap the webhook admits: %v", err)
	}
	if l := logs.String(); strings.Contains(l, "forbidden") || strings.Contains(l, "missing RBAC permission") || strings.Contains(l, "mutating") {
		t.Errorf("the validating-only program, as its ServiceAccount, met a refusal or a mutating configuration:\n%s", l)
	}
}

// printManifests returns what the test binary run as the program of mode
// (envMain), with its webhooks named name, prints for --manifests and
// flags, named name.
func printManifests(t *testing.T, mode, name string, flags ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"--manifests", "--manifests-name", name}, flags...)...)
	cmd.Env = append(os.Environ(), envMain+"="+mode, envWebhookName+"="+name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--manifests: %v (stderr: %s)", err, stderr.String())
	}
	return out
}

// manifestKinds returns the kinds of the manifests' documents, in order,
// and the arguments of the Deployment's one container.
func manifestKinds(t *testing.T, manifests []byte) (kinds, deployArgs []string) {
	t.Helper()
	var deploy struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct{ Args []string }
				}
			}
		}
	}
	for _, doc := range strings.Split(string(manifests), "---\n") {
		var m struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		kinds = append(kinds, m.Kind)
		if m.Kind == "Deployment" {
			if err := yaml.Unmarshal([]byte(doc), &deploy); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(deploy.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1:\n%s", len(deploy.Spec.Template.Spec.Containers), manifests)
	}
	return kinds, deploy.Spec.Template.Spec.Containers[0].Args
}

// applyManifests applies them to srv as they are, server-side.
func applyManifests(t *testing.T, srv *apiserver.Server, manifests []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(file, manifests, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(t.Context(), "kubectl", "--kubeconfig", srv.Kubeconfig(), "apply", "--server-side",
		"--field-manager", "manifest-test", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply --server-side: %v\n%s\nmanifests:\n%s", err, b, manifests)
	}
}

// slicesWithout returns s without v.
func slicesWithout(s []string, v string) []string {
	var out []string
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// waitUntil polls cond every 50ms (it looks at another process) until it
// holds, or fails after d with what logs returns.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s; the program's log:\n%s", what, d, logs())
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// getMetrics GETs https://addr/metrics with token (none if ""), retrying
// while the listener is not up yet.
func getMetrics(t *testing.T, addr, token string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // a self-signed certificate: the token is the check
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics: %v", err)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// webhooksByURL returns the manifests with the webhook configurations' and
// the CRDs' conversion clientConfig turned from the Service to base + its
// path, and the configurations' namespaceSelector limited to ns.
func webhooksByURL(t *testing.T, manifests []byte, base, ns string) []byte {
	var docs []string
	for _, doc := range strings.Split(string(manifests), "---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if kind := m["kind"]; kind == "ValidatingWebhookConfiguration" || kind == "MutatingWebhookConfiguration" {
			for _, w := range m["webhooks"].([]any) {
				hook := w.(map[string]any)
				cc := hook["clientConfig"].(map[string]any)
				path := cc["service"].(map[string]any)["path"].(string)
				hook["clientConfig"] = map[string]any{"url": base + path}
				hook["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}
			}
			b, err := yaml.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			doc = string(b)
		}
		if m["kind"] == "CustomResourceDefinition" {
			spec := m["spec"].(map[string]any)
			if conv, ok := spec["conversion"].(map[string]any); ok {
				cc := conv["webhook"].(map[string]any)["clientConfig"].(map[string]any)
				path := cc["service"].(map[string]any)["path"].(string)
				conv["webhook"].(map[string]any)["clientConfig"] = map[string]any{"url": base + path}
			}
			b, err := yaml.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			doc = string(b)
		}
		docs = append(docs, doc)
	}
	return []byte(strings.Join(docs, "---\n"))
}
