package manager_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// envMain makes the test binary a program whose main is manager.Main
// (mainProcess): "run" adds a runnable that prints --greeting and waits,
// "fail-setup" fails in setup.
const envMain = "CTRLKIT_TEST_MAIN"

func mainProcess() {
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError) // the testing flags are not this program's
	greeting := flag.String("greeting", "running", "what to print once running")
	manager.Main(manager.Options{Logger: slog.New(slog.DiscardHandler)}, func(m *manager.Manager) error {
		switch os.Getenv(envMain) {
		case "fail-setup":
			return errors.New("setup refused")
		case "webhooks":
			return errors.Join(
				webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
					Create: func(context.Context, *corev1.ConfigMap) (webhook.Warnings, error) { return nil, nil }}),
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
