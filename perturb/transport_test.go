package perturb

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeServer answers a transport's requests in memory: a watch gets a
// body the test writes into; anything else gets 200 and is recorded with
// whether its context had ended when it arrived.
type fakeServer struct {
	mu       sync.Mutex
	got      []string // "METHOD path", in order
	canceled []bool
	streams  map[string]*io.PipeWriter // by the watch's URL
	// watchType is the Content-Type of its watch streams; "" for none
	// (the transport then holds them byte by byte).
	watchType string
}

func (s *fakeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, req.Method+" "+req.URL.Path)
	s.canceled = append(s.canceled, req.Context().Err() != nil)
	body := io.NopCloser(strings.NewReader("{}"))
	if req.URL.Query().Get("watch") == "true" {
		r, w := io.Pipe()
		s.streams[req.URL.String()] = w
		context.AfterFunc(req.Context(), func() { w.CloseWithError(req.Context().Err()) })
		body = r
	}
	resp := &http.Response{StatusCode: http.StatusOK, Body: body, Request: req, Header: http.Header{}}
	if s.watchType != "" && req.URL.Query().Get("watch") == "true" {
		resp.Header.Set("Content-Type", s.watchType)
	}
	return resp, nil
}

func (s *fakeServer) stream(u string) *io.PipeWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[u]
}

func (s *fakeServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func newFake() *fakeServer { return &fakeServer{streams: map[string]*io.PipeWriter{}} }

func do(t *testing.T, rt http.RoundTripper, ctx context.Context, method, u string) (*http.Response, error) {
	t.Helper()
	parsed, err := url.Parse("https://server" + u)
	if err != nil {
		t.Fatal(err)
	}
	req := (&http.Request{Method: method, URL: parsed, Header: http.Header{}}).WithContext(ctx)
	return rt.RoundTrip(req)
}

const cmWatch = "/api/v1/namespaces/ns/configmaps?watch=true&labelSelector=a"

func TestTransport_holdsAWatchStreamUntilReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake()
		tr := newTransport("a", 0, time.Now(), runFaults{}, func() {})
		rt := &wrapped{t: tr, next: srv}
		resp, err := do(t, rt, t.Context(), http.MethodGet, cmWatch)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		tr.hold("configmaps")
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 16)
			n, _ := resp.Body.Read(b)
			got <- string(b[:n])
		}()
		go func() { _, _ = io.WriteString(srv.stream("https://server"+cmWatch), "event") }()
		synctest.Wait()
		select {
		case s := <-got:
			t.Fatalf("read %q from a held stream", s)
		default:
		}
		if busy, _ := tr.settling(); !busy {
			t.Error("a hold under way does not count as a perturbation under way")
		}
		tr.release("configmaps")
		if s := <-got; s != "event" {
			t.Fatalf("read %q once released, want the held event", s)
		}
	})
}

func TestTransport_relistCutsEachWatchOfTheResourceAndRefusesItsNextRequestOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake()
		tr := newTransport("a", 0, time.Now(), runFaults{}, func() {})
		rt := &wrapped{t: tr, next: srv}
		other := "/api/v1/namespaces/ns/configmaps?watch=true&labelSelector=b"
		secrets := "/api/v1/namespaces/ns/secrets?watch=true"
		bodies := map[string]io.ReadCloser{}
		for _, u := range []string{cmWatch, other, secrets} {
			resp, err := do(t, rt, t.Context(), http.MethodGet, u)
			if err != nil {
				t.Fatal(err)
			}
			bodies[u] = resp.Body
		}
		tr.relist("configmaps")
		for _, u := range []string{cmWatch, other} {
			if n, err := bodies[u].Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Errorf("%s after the cut: read %d, %v; want io.EOF", u, n, err)
			}
			bodies[u].Close()
		}
		if busy, _ := tr.settling(); !busy {
			t.Error("a relist whose informers have not read again does not count as under way")
		}
		for _, u := range []string{cmWatch, other} { // each cut watch is refused once, then served
			resp, err := do(t, rt, t.Context(), http.MethodGet, u)
			if err != nil || resp.StatusCode != http.StatusGone {
				t.Fatalf("%s's next request: %v, %v; want 410 Gone", u, resp, err)
			}
			if resp, err = do(t, rt, t.Context(), http.MethodGet, strings.Replace(u, "?watch=true&", "?", 1)); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s's list: %v, %v; want 200", u, resp, err)
			}
		}
		if busy, _ := tr.settling(); busy {
			t.Error("the relist is still under way after each cut watch's informer listed again")
		}
		go func() { _, _ = io.WriteString(srv.stream("https://server"+secrets), "ok") }()
		b := make([]byte, 8)
		if n, err := bodies[secrets].Read(b); err != nil || string(b[:n]) != "ok" {
			t.Errorf("the secrets watch, not relisted: read %q, %v", b[:n], err)
		}
		bodies[secrets].Close()
	})
}

func TestTransport_stallHoldsEveryRequestAndSendsTheHeldWriteEvenIfItsContextEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake()
		tr := newTransport("a", 0, time.Now(), runFaults{stallAt: 2}, func() {})
		rt := &wrapped{t: tr, next: srv}
		if _, err := do(t, rt, t.Context(), http.MethodPost, "/api/v1/namespaces/ns/configmaps"); err != nil {
			t.Fatal(err)
		}
		writeCtx, cancel := context.WithCancel(t.Context())
		wrote := make(chan error, 1)
		go func() {
			_, err := do(t, rt, writeCtx, http.MethodPut, "/api/v1/namespaces/ns/configmaps/x")
			wrote <- err
		}()
		<-tr.stalled
		read := make(chan error, 1)
		go func() {
			_, err := do(t, rt, t.Context(), http.MethodGet, "/api/v1/namespaces/ns/configmaps")
			read <- err
		}()
		cancel() // the replica gives up: a paused process does not see it
		synctest.Wait()
		if got := srv.requests(); len(got) != 1 {
			t.Fatalf("the server got %v while the transport was stalled, want only the first write", got)
		}
		tr.resume()
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		if err := <-read; err != nil {
			t.Fatal(err)
		}
		got := srv.requests()
		put := slices.Index(got, "PUT /api/v1/namespaces/ns/configmaps/x")
		if len(got) != 3 || put < 0 || srv.canceled[put] {
			t.Fatalf("after resume the server got %v (canceled %v), want the held write sent live, and the read", got, srv.canceled)
		}
		if h := tr.history(); len(h) != 2 || h[1].N != 2 || h[1].Status != http.StatusOK {
			t.Fatalf("history %v, want both writes", h)
		}
	})
}

func TestTransport_runtimeWritesAreNotTheControllers(t *testing.T) {
	srv := newFake()
	crashed := make(chan struct{})
	tr := newTransport("a", 0, time.Now(), runFaults{crashAfter: 1}, func() { close(crashed) })
	rt := &wrapped{t: tr, next: srv}
	for _, u := range []string{"/api/v1/namespaces/ns/events", "/apis/events.k8s.io/v1/namespaces/ns/events",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/controller", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"} {
		if _, err := do(t, rt, t.Context(), http.MethodPost, u); err != nil {
			t.Fatal(err)
		}
	}
	if h := tr.history(); len(h) != 0 || tr.isCrashed() {
		t.Fatalf("runtime writes counted as the controller's: %v", h)
	}
	if _, err := do(t, rt, t.Context(), http.MethodPost, "/api/v1/namespaces/ns/leasesets"); err != nil {
		t.Fatal(err) // a resource whose name starts like one of the runtime's is the controller's
	}
	<-crashed
	if _, err := do(t, rt, t.Context(), http.MethodGet, "/api/v1/namespaces/ns/configmaps"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a request after the crash: %v, want ErrCrashed", err)
	}
}

func TestTransport_noStallBeginsAfterShutdown(t *testing.T) {
	srv := newFake()
	tr := newTransport("a", 0, time.Now(), runFaults{stallAt: 1}, func() {})
	tr.shutdown()
	if _, err := do(t, &wrapped{t: tr, next: srv}, t.Context(), http.MethodPost, "/api/v1/namespaces/ns/configmaps"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.stalled:
		t.Fatal("a stall began after shutdown")
	default:
	}
}

// A write the trial gives an error to: a 409, 429 or 500 answer the server
// never sees, a timeout before it or after the server applied it; each
// recorded with what was done to it; the other writes go through.
func TestTransport_injectsAnAPIErrorIntoTheChosenWrite(t *testing.T) {
	const cms = "/api/v1/namespaces/ns/configmaps"
	for _, c := range []struct {
		kind   apiError
		status int // 0: a timeout error
		sent   bool
	}{
		{errConflict, http.StatusConflict, false},
		{errThrottled, http.StatusTooManyRequests, false},
		{errInternal, http.StatusInternalServerError, false},
		{errTimeout, 0, false},
		{errLost, 0, true},
	} {
		t.Run(c.kind.String(), func(t *testing.T) {
			srv := newFake()
			tr := newTransport("a", 0, time.Now(), runFaults{errAt: 2, errKind: c.kind}, func() {})
			rt := &wrapped{t: tr, next: srv}
			for i := 1; i <= 3; i++ {
				resp, err := do(t, rt, t.Context(), http.MethodPost, cms)
				switch {
				case i != 2 && (err != nil || resp.StatusCode != http.StatusOK):
					t.Fatalf("write %d: %v, want it through", i, err)
				case i == 2 && c.status == 0 && !errors.Is(err, ErrTimeout):
					t.Fatalf("write 2: %v, want ErrTimeout", err)
				case i == 2 && c.status != 0 && (err != nil || resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json"):
					t.Fatalf("write 2: %v, %+v; want a %d Status", err, resp, c.status)
				}
				if resp != nil {
					_ = resp.Body.Close()
				}
			}
			if want := 2 + map[bool]int{true: 1}[c.sent]; len(srv.requests()) != want {
				t.Errorf("the server got %d writes, want %d", len(srv.requests()), want)
			}
			if ws := tr.history(); len(ws) != 3 || ws[1].Fault == "" || ws[0].Fault != "" || ws[2].Fault != "" {
				t.Errorf("recorded %v: want three writes, the second marked", ws)
			}
		})
	}
}
