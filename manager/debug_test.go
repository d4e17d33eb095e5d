package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

func TestManager_refusesToServeTheDebugPageBeyondLoopbackWithoutAToken(t *testing.T) {
	leakcheck.Check(t)
	cfg := &rest.Config{Host: "http://127.0.0.1:1"} // never reached: Run fails first
	for _, tc := range []struct {
		name string
		opts manager.Options
		want error // nil: Run gets past the check (and fails to reach the server)
	}{
		{"every interface without a token", manager.Options{HTTPAddr: ":0"}, manager.ErrDebugExposed},
		{"an explicit wildcard without a token", manager.Options{HTTPAddr: "0.0.0.0:0"}, manager.ErrDebugExposed},
		{"every interface with a token", manager.Options{HTTPAddr: ":0", DebugToken: "t"}, nil},
		{"every interface with the page disabled", manager.Options{HTTPAddr: ":0", DisableDebug: true}, nil},
		{"every interface with pprof and the page disabled", manager.Options{HTTPAddr: ":0", DisableDebug: true,
			EnablePprof: true}, manager.ErrDebugExposed},
		{"every interface with pprof and the page", manager.Options{HTTPAddr: ":0", EnablePprof: true},
			manager.ErrDebugExposed},
		{"every interface with pprof and a token", manager.Options{HTTPAddr: ":0", DisableDebug: true,
			EnablePprof: true, DebugToken: "t"}, nil},
		{"loopback with pprof without a token", manager.Options{HTTPAddr: "127.0.0.1:0", EnablePprof: true}, nil},
		{"loopback without a token", manager.Options{HTTPAddr: "127.0.0.1:0"}, nil},
		{"no listener", manager.Options{HTTPAddr: "0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = quiet(t).Logger
			tc.opts.StartTimeout = time.Second
			m, err := manager.New(cfg, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			err = m.Run(t.Context())
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "DebugToken") {
					t.Fatalf("Run = %v, want %v naming DebugToken", err, tc.want)
				}
				if tc.opts.EnablePprof && !strings.Contains(err.Error(), "pprof") {
					t.Fatalf("Run = %v, want it to name pprof", err)
				}
				return
			}
			if errors.Is(err, manager.ErrDebugExposed) || !errors.Is(err, manager.ErrUnreachable) {
				t.Fatalf("Run = %v, want it past the debug check, failing to reach the server", err)
			}
		})
	}
}

// getJSON fetches url into v and returns the status code.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

func TestManager_debugStateAndExplainOnTheRealServer(t *testing.T) {
	m, srv, ns := quietManager(t)
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	rec := controller.ReconcileFunc[object.ObjectName](func(_ context.Context, n object.ObjectName) (controller.Result, error) {
		if strings.HasPrefix(n.Name, "bad") {
			return controller.Result{}, fmt.Errorf("cannot reconcile %s: it is bad", n.Name)
		}
		return controller.Result{}, nil
	})
	if _, err := manager.NewController(m, "cms", rec, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	base := start(t, m) + debug.Path
	kube := apiserver.Client(t, srv.Config())
	for _, name := range []string{"good", "bad-1"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var st debug.State
	eventually(t, 30*time.Second, "state.json shows both ConfigMaps cached and the bad one's error", func() bool {
		st = debug.State{}
		if code := getJSON(t, base+"/state.json", &st); code != 200 {
			t.Fatalf("state.json: %d", code)
		}
		return len(st.Informers) == 1 && st.Informers[0].Objects == 2 && len(st.Controllers) == 1 &&
			len(st.Controllers[0].LastErrors) > 0
	})
	inf, c := st.Informers[0], st.Controllers[0]
	if inf.Resource != "configmaps/v1" || inf.Kind != "v1 ConfigMap" || inf.Namespace != ns || !inf.Synced ||
		inf.ResourceVersion == "" || inf.Mode == "" || inf.Syncs == 0 || inf.ApproxBytes == 0 || inf.WatchAgeSeconds == nil {
		t.Errorf("informer = %+v", inf)
	}
	if len(inf.Handlers) != 1 || inf.Handlers[0].Name != "cms" {
		t.Errorf("handlers = %+v", inf.Handlers)
	}
	inBands := 0 // the bands that hold keys: none while bad-1 waits out its backoff
	for _, b := range c.Queue.Bands {
		inBands += b.Depth
	}
	if e := c.LastErrors[0]; c.Name != "cms" || e.Key != ns+"/bad-1" || !strings.Contains(e.Error, "it is bad") || c.Errors == 0 ||
		inBands != c.Queue.Depth {
		t.Errorf("controller = %+v", c)
	}

	var ex debug.Explanation
	if code := getJSON(t, base+"/explain?controller=cms&key="+ns+"/bad-1", &ex); code != 200 {
		t.Fatalf("explain: %d %+v", code, ex)
	}
	if !ex.Cached || ex.ResourceVersion == "" || ex.Attempts == 0 || ex.LastError == nil || ex.LastReason == nil {
		t.Errorf("explain bad-1 = %+v", ex)
	}
	// Between retries the key waits because of its error; while it is
	// reconciled, because of its creation (or the previous retry).
	if r := ex.LastReason; r != nil && r.Event != "retry after error" && (r.Event != "add" || r.Source != inf.Name) {
		t.Errorf("last reason = %+v, want a retry or the add event of %s", r, inf.Name)
	}
	var bad struct{ Error string }
	if code := getJSON(t, base+"/explain?controller=cms&key=oops/", &bad); code != 400 || !strings.Contains(bad.Error, "malformed key") {
		t.Errorf("malformed key: %d %q", code, bad.Error)
	}
	if code := getJSON(t, base+"/explain?controller=nope&key=a/b", &bad); code != 404 || !strings.Contains(bad.Error, `"cms"`) {
		t.Errorf("unknown controller: %d %q", code, bad.Error)
	}
	ex = debug.Explanation{}
	if code := getJSON(t, base+"/explain?controller=cms&key="+ns+"/nobody", &ex); code != 200 || ex.Known || ex.Cached {
		t.Errorf("unknown key: %d %+v", code, ex)
	}
}

// untilStopped is a runnable that keeps a manager without controllers
// running until its context ends.
var untilStopped = manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil })

// startWithPprof runs a manager of opts with pprof on srv until the test
// ends, and returns its listener's base URL.
func startWithPprof(t *testing.T, srv *apiserver.Server, opts manager.Options) string {
	t.Helper()
	opts.EnablePprof = true
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add(untilStopped); err != nil {
		t.Fatal(err)
	}
	return start(t, m)
}

// getHost sends a GET to url with the Host header host and returns the
// status code and body.
func getHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestManager_loopbackClientsNamingAForeignHostAreRefused(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	opts := quiet(t)
	base := startWithPprof(t, srv, opts)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	for _, path := range []string{debug.Path + "/state.json", debug.Path + "/explain?controller=c&key=a/b",
		"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		for _, host := range []string{"rebound.example:" + port, "rebound.example", "localhost.rebound.example:" + port} {
			if code, body := getHost(t, base+path, host); code != http.StatusForbidden {
				t.Errorf("%s with Host %s: %d, want 403: %.200s", path, host, code, body)
			}
		}
		for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
			if code, body := getHost(t, base+path, host); code == http.StatusForbidden || code == http.StatusUnauthorized {
				t.Errorf("%s with Host %s: %d, want it served: %.200s", path, host, code, body)
			}
		}
	}
	if code, _ := getHost(t, base+debug.Path, "rebound.example"); code != 200 {
		t.Errorf("the page, which holds no data, with a foreign Host: %d, want 200", code)
	}
	if code, _ := getHost(t, base+"/metrics", "rebound.example"); code != 200 {
		t.Errorf("/metrics with a foreign Host: %d, want 200", code)
	}
}
