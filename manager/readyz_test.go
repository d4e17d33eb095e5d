package manager_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// killableServer starts an API server for t alone, which t may stop
// (SIGSTOP) and kill (SIGKILL): it is continued, then stopped, when t ends,
// and its exit by SIGKILL is no error.
func killableServer(t *testing.T) *apiserver.Server {
	t.Helper()
	srv, err := apiserver.Start(t.Context(), apiserver.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatalf("the real API server is required and did not start: %v", err)
	}
	pid := srv.PID()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT) // a stopped server cannot handle the SIGTERM of Stop
		var exit *exec.ExitError
		if err := srv.Stop(); err != nil && !(errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL) {
			t.Errorf("stop the API server: %v", err)
		}
	})
	return srv
}

func sendSignal(t *testing.T, pid int, sig syscall.Signal) time.Time {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("%v to the API server (pid %d): %v", sig, pid, err)
	}
	return time.Now()
}

// untilReadyz polls url every 100ms until it answers code, and returns
// the body; it fails t after within.
func untilReadyz(t *testing.T, url string, code int, within time.Duration) string {
	t.Helper()
	start := time.Now()
	for {
		got, body := get(t, url)
		if got == code {
			return body
		}
		if time.Since(start) > within {
			t.Fatalf("%s answered %d after %s, want %d: %s", url, got, within, code, body)
		}
		time.Sleep(100 * time.Millisecond) // polling a real server, not synchronising goroutines
	}
}

func TestManager_readyzFailsWithinTheBoundWhileTheAPIServerIsStoppedOrDeadAndRecovers(t *testing.T) {
	leakcheck.Check(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	srv := killableServer(t)
	ns := srv.Namespace(t)
	const bound = 3 * time.Second // the probe's timeout is 1s
	opts := quiet(t)
	opts.UnreachableBound = bound
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	if err := m.Add(untilStopped); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	untilReadyz(t, base+"/readyz", 200, 30*time.Second)
	if code, body := get(t, base+"/readyz?verbose"); code != 200 || !strings.Contains(body, "apiserver: answered") {
		t.Errorf("/readyz?verbose when ready: %d %q, want 200 naming the API server's last answer", code, body)
	}
	pid := srv.PID()
	token := srv.Config().BearerToken

	// The last answer came at most a second (the probe's period) before
	// the server stopped; so the first 503 comes between bound-1s and
	// bound after it, plus scheduling on a loaded machine.
	notReady := func(what string, since time.Time) string {
		t.Helper()
		body := untilReadyz(t, base+"/readyz?verbose", 503, bound+5*time.Second)
		took := time.Since(since)
		t.Logf("%s: not ready after %s: %s", what, took.Round(time.Millisecond), strings.TrimSpace(body))
		if lo, hi := bound/2, bound+2*time.Second; took < lo || took > hi {
			t.Errorf("%s: not ready after %s, want between %s and %s", what, took, lo, hi)
		}
		if !strings.Contains(body, "apiserver: no answer for") || !strings.Contains(body, "(bound 3s): GET /livez: ") {
			t.Errorf("%s: /readyz?verbose does not name the API server's silence: %q", what, body)
		}
		if strings.Contains(body, srv.URL()) || (token != "" && strings.Contains(body, token)) {
			t.Errorf("%s: /readyz?verbose shows the server's URL or token: %q", what, body)
		}
		if code, body := get(t, base+"/healthz"); code != 200 {
			t.Errorf("%s: /healthz %d %q, want 200: a restart does not bring the API server back", what, code, body)
		}
		return body
	}

	stopped := sendSignal(t, pid, syscall.SIGSTOP)
	notReady("SIGSTOP", stopped)
	continued := sendSignal(t, pid, syscall.SIGCONT)
	untilReadyz(t, base+"/readyz", 200, 15*time.Second)
	t.Logf("SIGCONT: ready again after %s", time.Since(continued).Round(time.Millisecond))

	killed := sendSignal(t, pid, syscall.SIGKILL)
	notReady("SIGKILL", killed)
	// The informer's relists are refused too; once for the bound, it is
	// named as well.
	failing := "informer configmaps/v1 in namespace " + ns + ": lists and watches failing for "
	var body string
	eventually(t, bound+10*time.Second, "/readyz?verbose naming the failing informer", func() bool {
		var code int
		code, body = get(t, base+"/readyz?verbose")
		return code == 503 && strings.Contains(body, failing)
	})
	t.Logf("SIGKILL, later: %s", strings.TrimSpace(body))
}

func TestManager_aStandbyWithSyncedCachesIsReady(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	var bases []string
	var ms []*manager.Manager
	for _, id := range []string{"a", "b"} {
		opts := quiet(t)
		opts.LeaderElection = election.Options{Name: "readyz", Namespace: ns, Identity: id}
		m, err := manager.New(srv.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
		if _, err := manager.NewController(m, "noop", controller.ReconcileFunc[object.ObjectName](
			func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
			manager.ControllerOptions{}, manager.For(cms)); err != nil {
			t.Fatal(err)
		}
		bases, ms = append(bases, start(t, m)), append(ms, m)
	}
	eventually(t, 30*time.Second, "one replica leading", func() bool { return ms[0].Elector().IsLeader() || ms[1].Elector().IsLeader() })
	standby := bases[0]
	if ms[0].Elector().IsLeader() {
		standby = bases[1]
	}
	untilReadyz(t, standby+"/readyz", 200, 30*time.Second)
	if code, body := get(t, standby+"/readyz?verbose"); code != 200 || !strings.Contains(body, "apiserver: answered") {
		t.Errorf("the standby's /readyz?verbose: %d %q, want 200 naming the API server's last answer", code, body)
	}
}
