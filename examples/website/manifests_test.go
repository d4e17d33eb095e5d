package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"

	webv1 "example.com/website/api/v1"
)

// The operator's own manifests, printed by its main (--manifests) without
// a cluster, are accepted whole by the API server (a server-side apply,
// dry run: the webhook configurations would otherwise send every
// Website of the shared test server to a Service that is not there).
func TestWebsite_manifestsAreAcceptedByTheAPIServer(t *testing.T) {
	srv := env.Get(t)
	args, cl, stdout := os.Args, flag.CommandLine, os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	os.Args = []string{"website", "--manifests", "--manifests-image", "registry.example.com/website:v1"}
	flag.CommandLine = flag.NewFlagSet("website", flag.ContinueOnError)
	os.Stdout = w
	main()
	os.Args, flag.CommandLine, os.Stdout = args, cl, stdout
	w.Close()
	out := <-read
	for _, want := range []string{"kind: CustomResourceDefinition", "name: websites.example.com", "kind: Deployment",
		"namespace: website-system", "- --webhook-cert-secret=website-system/website-webhook-cert",
		"kind: ValidatingWebhookConfiguration", "kind: MutatingWebhookConfiguration", "- websites/status", "- deployments"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the manifests lack %q:\n%s", want, out)
		}
	}
	// A dry run makes nothing, the namespaces included: make them first
	// (the operator's, and the site directory's, where it is granted its
	// reads and writes of ConfigMaps).
	kubectl := func(args ...string) ([]byte, error) {
		return exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", srv.Kubeconfig()}, args...)...).CombinedOutput()
	}
	for _, ns := range []string{"website-system", "websites"} {
		if b, err := kubectl("create", "namespace", ns); err != nil && !strings.Contains(string(b), "AlreadyExists") {
			t.Fatalf("%v: %s", err, b)
		}
		t.Cleanup(func() { _, _ = kubectl("delete", "namespace", ns, "--wait=false") })
	}
	file := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := kubectl("apply", "--server-side", "--dry-run=server", "--field-manager", "website-test", "-f", file); err != nil {
		t.Fatalf("kubectl apply --server-side --dry-run=server: %v\n%s", err, b)
	} else if n := strings.Count(string(b), "serverside-applied"); n != strings.Count(string(out), "\n---\n")+1 {
		t.Errorf("%d objects applied:\n%s", n, b)
	}
}

// The operator runs with the ClusterRole its +kubebuilder:rbac markers
// grant and nothing more: as the ServiceAccount a cluster would run it as
// (impersonated), it makes a Website's children, writes its status, and
// runs its finalizer. The other tests run as the server's administrator,
// which would hide a missing verb until the operator met a cluster.
func TestWebsite_runsWithOnlyTheRoleItsMarkersGrant(t *testing.T) {
	srv := env.Get(t)
	ctx := t.Context()
	if err := apiserver.InstallCRDs(ctx, srv.Config(), CRDs); err != nil {
		t.Fatal(err)
	}
	ns, directory := srv.Namespace(t), srv.Namespace(t)
	kube := apiserver.Client(t, srv.Config())
	b, err := os.ReadFile(filepath.Join("config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	role.Name = "website-" + ns // one per test run: the server is shared
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "website", Namespace: ns}}}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})

	asOperator := rest.CopyConfig(srv.Config())
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":website"}
	m, err := manager.New(asOperator, manager.Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler),
		AddToScheme: []func(*runtime.Scheme) error{webv1.AddToScheme},
		Informers:   informer.FactoryOptions{KeepManagedFieldsOf: []string{applyOptions.FieldManager}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(m, directory); err != nil {
		t.Fatal(err)
	}
	start(t, m)

	admin, err := dynamic.NewForConfig(srv.Config()) // the user creates the Website, not the operator
	if err != nil {
		t.Fatal(err)
	}
	websites := admin.Resource(webv1.GroupVersion.WithResource("websites")).Namespace(ns)
	site := &unstructured.Unstructured{Object: map[string]any{"apiVersion": webv1.GroupVersion.String(), "kind": "Website",
		"metadata": map[string]any{"name": "shop"}, "spec": map[string]any{"host": "shop.example.com", "image": "nginx:1.27"}}}
	if _, err := websites.Create(ctx, site, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the children and the status, written as the operator", func(ctx context.Context) error {
		if _, err := kube.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := kube.CoreV1().Services(ns).Get(ctx, "shop", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := kube.CoreV1().ConfigMaps(directory).Get(ctx, ns+".shop", metav1.GetOptions{}); err != nil {
			return err
		}
		got, err := websites.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); observed != got.GetGeneration() {
			return fmt.Errorf("status.observedGeneration %d, generation %d", observed, got.GetGeneration())
		}
		return nil
	})
	if err := websites.Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the finalizer to remove the directory entry and let the Website go", func(ctx context.Context) error {
		if _, err := kube.CoreV1().ConfigMaps(directory).Get(ctx, ns+".shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errors.New("the directory entry is still there")
		}
		if _, err := websites.Get(ctx, "shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errors.New("the Website is still there")
		}
		return nil
	})
}
