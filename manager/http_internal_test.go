package manager

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The handler is tested directly here: a request from beyond loopback
// needs an address this machine may not have, so RemoteAddr is set by hand.
func TestHandler_pprofBeyondLoopbackNeedsTheToken(t *testing.T) {
	for _, tc := range []struct {
		name, token, remote, host, auth string
		code                            int
	}{
		{"beyond loopback without a token configured", "", "192.0.2.1:5000", "192.0.2.2:8080", "", 403},
		{"beyond loopback without the token", "s3cret", "192.0.2.1:5000", "192.0.2.2:8080", "", 401},
		{"beyond loopback with a wrong token", "s3cret", "192.0.2.1:5000", "192.0.2.2:8080", "Bearer guess", 403},
		{"beyond loopback with the token", "s3cret", "192.0.2.1:5000", "192.0.2.2:8080", "Bearer s3cret", 200},
		{"loopback naming the configured host", "", "127.0.0.1:5000", "ctrl.example:8080", "", 200},
		{"loopback naming a foreign host", "", "127.0.0.1:5000", "rebound.example:8080", "", 403},
		{"loopback naming localhost", "", "127.0.0.1:5000", "localhost:8080", "", 200},
		{"a sidecar's loopback peer without the configured token", "s3cret", "127.0.0.6:40000", "localhost:8080", "", 401},
		{"loopback with the configured token", "s3cret", "127.0.0.1:5000", "localhost:8080", "Bearer s3cret", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(&rest.Config{Host: "http://127.0.0.1:1"}, Options{HTTPAddr: "ctrl.example:8080",
				EnablePprof: true, DisableDebug: true, DebugToken: tc.token, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			h := m.handler(true)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1",
				"/debug/pprof/symbol", "/debug/pprof/heap"} {
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.RemoteAddr, r.Host = tc.remote, tc.host
				if tc.auth != "" {
					r.Header.Set("Authorization", tc.auth)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != tc.code {
					t.Errorf("%s: %d, want %d: %.200s", path, w.Code, tc.code, w.Body)
				}
				if path == "/debug/pprof/cmdline" && tc.code != 200 && strings.Contains(w.Body.String(), "s3cret") {
					t.Errorf("%s leaks the command line: %s", path, w.Body)
				}
			}
			// The probes and /metrics stay open to anyone.
			r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
			r.RemoteAddr = tc.remote
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if body, _ := io.ReadAll(w.Result().Body); w.Code != 200 {
				t.Errorf("/healthz: %d %s", w.Code, body)
			}
		})
	}
}

// The rest_client_* series have a host label: whoever writes the
// kubeconfigs a fleet's provider reads chooses hosts, so past
// maxRESTHosts new hosts share one label; the hosts seen before keep
// theirs.
func TestHostLabels_areBounded(t *testing.T) {
	var h hostLabels
	for i := range maxRESTHosts {
		host := fmt.Sprintf("10.0.0.%d:6443", i)
		if got := h.label(host); got != host {
			t.Fatalf("host %d of %d labelled %q, want its own", i, maxRESTHosts, got)
		}
	}
	if got := h.label("10.9.9.9:6443"); got != restHostOther {
		t.Errorf("a host past the bound labelled %q, want %q", got, restHostOther)
	}
	if got := h.label("10.0.0.1:6443"); got != "10.0.0.1:6443" {
		t.Errorf("a host seen before the bound labelled %q, want its own", got)
	}
}
