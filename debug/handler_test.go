package debug_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// fakeSource has one controller, "c", whose cache holds ns/cached and whose
// queue holds ns/queued.
type fakeSource struct{ now time.Time }

func (s fakeSource) State() debug.State {
	return debug.State{Time: s.now, Informers: []debug.Informer{{Name: "configmaps/v1", Objects: 1}},
		Controllers: []debug.Controller{{Name: "c", Queue: debug.Queue{Depth: 1, Bands: []debug.Band{{Name: "default", Depth: 1}}}}}}
}

type fakeCache struct{}

func (fakeCache) Name() string { return "configmaps/v1" }
func (fakeCache) CachedVersion(name object.ObjectName) (string, bool) {
	if name == (object.ObjectName{Namespace: "ns", Name: "cached"}) {
		return "42", true
	}
	return "", false
}

func (s fakeSource) Explain(name, raw string) (debug.Explanation, error) {
	if name != "c" {
		return debug.Explanation{}, fmt.Errorf("%w %q", debug.ErrUnknownController, name)
	}
	key, err := object.ParseObjectName(raw)
	if err != nil {
		return debug.Explanation{}, fmt.Errorf("%w %q: want namespace/name (%v)", debug.ErrMalformedKey, raw, err)
	}
	var ks controller.KeyStats[object.ObjectName]
	if key.String() == "ns/queued" {
		ks.Queue = workqueue.KeyState{Queued: true, Position: 0, Since: s.now.Add(-time.Second)}
		ks.First = controller.Reason{Event: "update", Source: "configmaps/v1", At: s.now.Add(-time.Second)}
		ks.Last, ks.Adds, ks.Attempts = ks.First, 1, 2
		ks.LastError = &controller.KeyError[object.ObjectName]{Key: key, Err: "boom", At: s.now, Attempt: 2}
	}
	return debug.Explain(name, key, key, ks, fakeCache{}, s.now), nil
}

// serve sends a GET to h from remote (host:port) with the Authorization
// header auth ("": none) and the Host header 127.0.0.1:8080.
func serve(h http.Handler, target, remote, auth string) *httptest.ResponseRecorder {
	return serveHost(h, target, remote, "127.0.0.1:8080", auth)
}

// serveHost is serve with the Host header host.
func serveHost(h http.Handler, target, remote, host, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr, r.Host = remote, host
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const local = "127.0.0.1:50000"

func TestHandler_stateJSONIsTheSourcesState(t *testing.T) {
	h := debug.New(fakeSource{now: time.Now()}, debug.Options{})
	w := serve(h, "/debug/ctrlkit/state.json", local, "")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("state.json: %d %s %s", w.Code, w.Header(), w.Body)
	}
	var st debug.State
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Informers) != 1 || st.Informers[0].Objects != 1 || len(st.Controllers) != 1 ||
		st.Controllers[0].Queue.Bands[0].Depth != 1 {
		t.Errorf("state.json = %+v", st)
	}
	for _, field := range []string{`"informers"`, `"controllers"`, `"bands"`, `"depth"`, `"objects"`} {
		if !strings.Contains(w.Body.String(), field) {
			t.Errorf("state.json has no %s: %s", field, w.Body)
		}
	}
}

func TestHandler_pageIsSelfContained(t *testing.T) {
	h := debug.New(fakeSource{now: time.Now()}, debug.Options{})
	for _, path := range []string{"/debug/ctrlkit", "/debug/ctrlkit/"} {
		w := serve(h, path, "192.0.2.1:1", "") // the page holds no data: served to anyone
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", path, w.Code, w.Header().Get("Content-Type"))
		}
		body := w.Body.String()
		for _, external := range []string{"http://", "https://", "//cdn", "src=\"/", "<link"} {
			if strings.Contains(body, external) {
				t.Errorf("%s refers to something outside itself: %q", path, external)
			}
		}
		for _, section := range []string{`id="informers"`, `id="handlers"`, `id="controllers"`, `id="errors"`, `id="explain"`} {
			if !strings.Contains(body, section) {
				t.Errorf("%s has no %s section", path, section)
			}
		}
	}
	if w := serve(h, "/debug/ctrlkit/nothing", local, ""); w.Code != 404 {
		t.Errorf("an unknown path: %d, want 404", w.Code)
	}
}

func TestHandler_explain(t *testing.T) {
	h := debug.New(fakeSource{now: time.Now()}, debug.Options{})
	for _, tc := range []struct {
		name, query string
		code        int
		want        []string // in the body
	}{
		{"a queued key says why, its attempts and its error", "controller=c&key=ns/queued", 200,
			[]string{`"queued":true`, `"event":"update"`, `"attempts":2`, `"error":"boom"`, `"known":true`, "queued at position 0"}},
		{"a cached key gives its resource version", "controller=c&key=ns/cached", 200,
			[]string{`"cached":true`, `"resourceVersion":"42"`, `"queued":false`}},
		{"an unknown key is an answer, not an error", "controller=c&key=ns/nobody", 200,
			[]string{`"known":false`, "not in the cache of configmaps/v1, not queued"}},
		{"a cluster-scoped name is a key", "controller=c&key=node-1", 200, []string{`"key":"node-1"`}},
		{"a key without a name is malformed", "controller=c&key=ns/", 400, []string{"malformed key", "namespace/name"}},
		{"a key without a namespace is malformed", "controller=c&key=/name", 400, []string{"malformed key"}},
		{"an empty key is malformed", "controller=c&key=", 400, []string{"malformed key"}},
		{"a missing controller is a bad request", "key=ns/queued", 400, []string{"missing parameter controller"}},
		{"an unknown controller is not found", "controller=nope&key=ns/queued", 404, []string{"unknown controller", "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(h, "/debug/ctrlkit/explain?"+tc.query, local, "")
			if w.Code != tc.code {
				t.Fatalf("code %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			for _, s := range tc.want {
				if !strings.Contains(w.Body.String(), s) {
					t.Errorf("body has no %s: %s", s, w.Body)
				}
			}
			if tc.code != 200 {
				var e struct{ Error string }
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
					t.Errorf("an error body is JSON with a message: %s (%v)", w.Body, err)
				}
			}
		})
	}
}

func TestHandler_clientsBeyondLoopbackNeedTheToken(t *testing.T) {
	for _, tc := range []struct {
		name, token, remote, auth string
		code                      int
	}{
		{"loopback needs no token", "", local, "", 200},
		{"IPv6 loopback needs no token", "", "[::1]:5000", "", 200},
		{"with a token set, loopback needs it too", "s3cret", local, "", 401},
		{"with a token set, loopback with it is served", "s3cret", local, "Bearer s3cret", 200},
		{"a sidecar's loopback peer without the token", "s3cret", "127.0.0.6:40000", "", 401},
		{"a sidecar's loopback peer with the token", "s3cret", "127.0.0.6:40000", "Bearer s3cret", 200},
		{"beyond loopback without a configured token is refused", "", "192.0.2.1:5000", "Bearer s3cret", 403},
		{"beyond loopback without a token is unauthorized", "s3cret", "192.0.2.1:5000", "", 401},
		{"beyond loopback with another scheme is unauthorized", "s3cret", "192.0.2.1:5000", "Basic czNjcmV0", 401},
		{"beyond loopback with a wrong token is forbidden", "s3cret", "192.0.2.1:5000", "Bearer guess", 403},
		{"beyond loopback with the token is served", "s3cret", "192.0.2.1:5000", "Bearer s3cret", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := debug.New(fakeSource{now: time.Now()}, debug.Options{Token: tc.token})
			for _, path := range []string{"/debug/ctrlkit/state.json", "/debug/ctrlkit/explain?controller=c&key=ns/queued"} {
				w := serve(h, path, tc.remote, tc.auth)
				if w.Code != tc.code {
					t.Errorf("%s: %d, want %d: %s", path, w.Code, tc.code, w.Body)
				}
				if tc.code == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: 401 without a Bearer challenge", path)
				}
			}
		})
	}
}

func TestHandler_loopbackClientsNamingAForeignHostNeedTheToken(t *testing.T) {
	for _, tc := range []struct {
		name, token, host, auth string
		hosts                   []string
		code                    int
	}{
		{"localhost with a port", "", "localhost:8080", "", nil, 200},
		{"localhost in capitals without a port", "", "LOCALHOST", "", nil, 200},
		{"an address of 127.0.0.0/8", "", "127.1.2.3:80", "", nil, 200},
		{"IPv6 loopback with a port", "", "[::1]:8080", "", nil, 200},
		{"IPv6 loopback without a port", "", "[::1]", "", nil, 200},
		{"the listener's configured host", "", "Ctrl.Example:8080", "", []string{"ctrl.example"}, 200},
		{"a rebinding name without a token configured", "", "evil.example:8080", "", nil, 403},
		{"a rebinding name that starts like localhost", "", "localhost.evil.example", "", nil, 403},
		{"a rebinding name not among the configured hosts", "", "evil.example", "", []string{"ctrl.example"}, 403},
		{"a non-loopback address", "", "192.0.2.1:8080", "", nil, 403},
		{"no Host header", "", "", "", nil, 403},
		{"a rebinding name without the configured token", "s3cret", "evil.example", "", nil, 401},
		{"localhost without the configured token", "s3cret", "localhost:8080", "", nil, 401},
		{"a foreign host with the token", "s3cret", "evil.example", "Bearer s3cret", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := debug.New(fakeSource{now: time.Now()}, debug.Options{Token: tc.token, Hosts: tc.hosts})
			for _, path := range []string{"/debug/ctrlkit/state.json", "/debug/ctrlkit/explain?controller=c&key=ns/queued"} {
				w := serveHost(h, path, local, tc.host, tc.auth)
				if w.Code != tc.code {
					t.Errorf("%s: %d, want %d: %s", path, w.Code, tc.code, w.Body)
				}
				if tc.code == 403 && tc.token == "" && strings.Contains(tc.host, "evil") &&
					!strings.Contains(w.Body.String(), "DNS rebinding") {
					t.Errorf("%s: the refusal does not say why: %s", path, w.Body)
				}
			}
			if w := serveHost(h, "/debug/ctrlkit", local, tc.host, ""); w.Code != 200 {
				t.Errorf("the page (no data) is refused: %d", w.Code)
			}
		})
	}
}

func TestGuard_appliesTheRuleToAnyHandler(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret")) })
	h := debug.Guard(debug.Options{Token: "s3cret"}, ok)
	for _, tc := range []struct {
		name, remote, host, auth string
		code                     int
	}{
		{"loopback without the token", local, "localhost:6060", "", 401},
		{"loopback with the token", local, "localhost:6060", "Bearer s3cret", 200},
		{"beyond loopback without the token", "192.0.2.1:5000", "192.0.2.2:6060", "", 401},
		{"beyond loopback with a wrong token", "192.0.2.1:5000", "192.0.2.2:6060", "Bearer s3cre", 403},
		{"beyond loopback with the token", "192.0.2.1:5000", "192.0.2.2:6060", "Bearer s3cret", 200},
	} {
		w := serveHost(h, "/debug/pprof/cmdline", tc.remote, tc.host, tc.auth)
		if w.Code != tc.code || (w.Body.String() == "secret") != (tc.code == 200) {
			t.Errorf("%s: %d %q, want %d", tc.name, w.Code, w.Body, tc.code)
		}
	}
}

// A proxy in the same Pod relays remote clients over loopback, adding a
// forwarding header: without a token such a request is refused, with one
// it must carry the token like any other.
func TestGuard_refusesRelayedRequestsWithoutAToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret")) })
	for _, header := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip", "X-Envoy-External-Address", "x-forwarded-for"} {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil)
		r.RemoteAddr, r.Host = "127.0.0.6:40000", "localhost:8080"
		r.Header.Set(header, "192.0.2.7")
		w := httptest.NewRecorder()
		debug.Guard(debug.Options{}, ok).ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "relayed by a proxy") {
			t.Errorf("%s, no token configured: %d %q, want 403 saying it was relayed", header, w.Code, w.Body)
		}
		r.Header.Set("Authorization", "Bearer s3cret")
		w = httptest.NewRecorder()
		debug.Guard(debug.Options{Token: "s3cret"}, ok).ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Body.String() != "secret" {
			t.Errorf("%s, with the token: %d %q, want 200", header, w.Code, w.Body)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil)
	r.RemoteAddr, r.Host = local, "localhost:8080"
	w := httptest.NewRecorder()
	debug.Guard(debug.Options{}, ok).ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("a direct loopback request without a forwarding header: %d, want 200", w.Code)
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.1:0": true, "[::1]:80": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.0.0.1:80": false, "example.com:80": false, "0": false,
	} {
		if got := debug.IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestExplain_wrapsUnknownController(t *testing.T) {
	_, err := fakeSource{}.Explain("x", "a/b")
	if !errors.Is(err, debug.ErrUnknownController) {
		t.Fatalf("err = %v", err)
	}
}
