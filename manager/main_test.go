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

	"github.com/ctrlkit/ctrlkit/manager"
)

// envMain makes the test binary a program whose main is manager.Main
// (mainProcess): "run" adds a runnable that prints --greeting and waits,
// "fail-setup" fails in setup.
const envMain = "CTRLKIT_TEST_MAIN"

func mainProcess() {
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError) // the testing flags are not this program's
	greeting := flag.String("greeting", "running", "what to print once running")
	manager.Main(manager.Options{Logger: slog.New(slog.DiscardHandler)}, func(m *manager.Manager) error {
		if os.Getenv(envMain) == "fail-setup" {
			return errors.New("setup refused")
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
