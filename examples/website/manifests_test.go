package main

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	// A dry run makes nothing, the namespace included: make it first.
	kubectl := func(args ...string) ([]byte, error) {
		return exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", srv.Kubeconfig()}, args...)...).CombinedOutput()
	}
	if b, err := kubectl("create", "namespace", "website-system"); err != nil && !strings.Contains(string(b), "AlreadyExists") {
		t.Fatalf("%v: %s", err, b)
	}
	t.Cleanup(func() { _, _ = kubectl("delete", "namespace", "website-system", "--wait=false") })
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
