package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// clientDeadline bounds every read of the raw-connection tests: a limit of
// the server's (a few hundred milliseconds in these tests) must act well
// before it.
const clientDeadline = 10 * time.Second

// serveTLS serves s with Serve on loopback until the test ends, with a
// certificate SelfSigned wrote to its CertDir, and returns the address, a
// client configuration trusting it and the CA's PEM.
func serveTLS(t *testing.T, s *webhook.Server) (string, *tls.Config, []byte) {
	t.Helper()
	ca, err := webhook.SelfSigned(s.Options().CertDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}, ca
}

// dial opens an HTTP/1.1 TLS connection to addr, closed when the test ends,
// whose reads and writes fail after clientDeadline.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(clientDeadline)); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// wantClosed fails unless the server closed the connection: a read ends
// with EOF, not with the client's deadline.
func wantClosed(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	b, err := br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("%s: the server sent %q, want the connection closed", what, b)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s: the connection was still open after %s", what, clientDeadline)
	case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset"):
		t.Fatalf("%s: %v, want the connection closed", what, err)
	}
}

func TestServe_cutsAStalledBodyAtBodyTimeout(t *testing.T) {
	leakcheck.Check(t)
	s := newServerWith(t, defaultGadget, webhook.Options{Limits: webhook.Limits{BodyTimeout: 200 * time.Millisecond}})
	addr, cfg, _ := serveTLS(t, s)
	want408 := func(t *testing.T, resp *http.Response) {
		t.Helper()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "Limits.BodyTimeout") {
			t.Fatalf("answered %s %q, want 408 naming Limits.BodyTimeout", resp.Status, body)
		}
	}

	t.Run("HTTP/1.1", func(t *testing.T) {
		conn, br := dial(t, addr, cfg)
		// The headers announce 1000 bytes; 14 come, then nothing.
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"+
			`{"apiVersion":`, validatePath)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		want408(t, resp)
		wantClosed(t, br, "after the stalled body")
	})

	t.Run("HTTP/2", func(t *testing.T) {
		h2 := cfg.Clone()
		h2.NextProtos = nil
		tr := &http.Transport{TLSClientConfig: h2, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte(`{"apiVersion":`)) }() // then nothing
		ctx, cancel := context.WithTimeout(t.Context(), clientDeadline)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+validatePath, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 1000
		req.Header.Set("Content-Type", "application/json")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("spoke %s, want HTTP/2", resp.Proto)
		}
		want408(t, resp)
	})
}

func TestServe_closesAnIdleKeepAliveConnection(t *testing.T) {
	leakcheck.Check(t)
	s := newServerWith(t, defaultGadget, webhook.Options{Limits: webhook.Limits{IdleTimeout: 200 * time.Millisecond}})
	addr, cfg, _ := serveTLS(t, s)
	conn, br := dial(t, addr, cfg)
	fmt.Fprintf(conn, "GET /nothing HTTP/1.1\r\nHost: webhook\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Close {
		t.Fatalf("answered %s (close %v), want 404 on a connection kept alive", resp.Status, resp.Close)
	}
	wantClosed(t, br, "the idle keep-alive connection")
}

func TestServe_refusesCBCSuitesAndTLSBefore1_2(t *testing.T) {
	leakcheck.Check(t)
	s := newServerWith(t, defaultGadget, webhook.Options{})
	addr, cfg, _ := serveTLS(t, s)
	for _, tc := range []struct {
		name   string
		min    uint16
		max    uint16
		suites []uint16
		ok     bool
	}{
		{"an ECDHE AES-GCM suite in TLS 1.2", tls.VersionTLS12, tls.VersionTLS12,
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, true},
		{"TLS 1.3", tls.VersionTLS13, tls.VersionTLS13, nil, true},
		{"the CBC-SHA1 suites", tls.VersionTLS12, tls.VersionTLS12,
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}, false},
		{"TLS 1.1", tls.VersionTLS10, tls.VersionTLS11, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg.Clone()
			c.MinVersion, c.MaxVersion, c.CipherSuites = tc.min, tc.max, tc.suites
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: clientDeadline}, Config: c}
			ctx, cancel := context.WithTimeout(t.Context(), clientDeadline)
			defer cancel()
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("handshake: %v; want it to succeed: %v", err, tc.ok)
			}
		})
	}
}

// blocking returns a server whose validator of Gadgets holds each create
// until release receives, after sending on entered.
func blocking(t *testing.T, limits webhook.Limits) (s *webhook.Server, entered chan struct{}, release chan struct{}) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: t.TempDir(), Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	entered, release = make(chan struct{}), make(chan struct{})
	err = webhook.AddValidator(s, webhook.Validator[*v2.Gadget]{Create: func(context.Context, *v2.Gadget) (webhook.Warnings, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s, entered, release
}

// postAsync posts body to h in a goroutine, which sends the status code
// on done.
func postAsync(h http.Handler, body string, done chan<- int) {
	go func() {
		req := httptest.NewRequest(http.MethodPost, validatePath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- rec.Code
	}()
}

// wantOK fails unless the next code on done is 200.
func wantOK(t *testing.T, done <-chan int, what string) {
	t.Helper()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("%s: answered %d, want 200", what, code)
	}
}

// want429 posts body and fails unless it is refused with 429 and a
// Retry-After.
func want429(t *testing.T, h http.Handler, body string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, validatePath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(rec.Body.String(), "too many reviews in flight") {
		t.Fatalf("answered %d (Retry-After %q) %q, want 429 with Retry-After: 1", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}

func TestServer_answers429BeyondTheReviewsInFlight(t *testing.T) {
	small := review(gadgetKind, `{"metadata":{"name":"g"}}`)
	large := review(gadgetKind, `{"metadata":{"name":"g","annotations":{"a":"`+strings.Repeat("x", 100<<10)+`"}}}`)

	t.Run("beyond MaxInFlight", func(t *testing.T) {
		s, entered, release := blocking(t, webhook.Limits{MaxInFlight: 2})
		done := make(chan int, 3)
		postAsync(s, small, done)
		postAsync(s, small, done)
		<-entered
		<-entered
		want429(t, s, small)
		release <- struct{}{}
		wantOK(t, done, "a review in flight")
		postAsync(s, small, done) // its place is free again
		<-entered
		release <- struct{}{}
		release <- struct{}{}
		wantOK(t, done, "a review in flight")
		wantOK(t, done, "a review in flight")
	})

	t.Run("beyond MaxBytesInFlight", func(t *testing.T) {
		s, entered, release := blocking(t, webhook.Limits{MaxBytesInFlight: 64 << 10})
		done := make(chan int, 1)
		postAsync(s, small, done)
		<-entered
		want429(t, s, large) // 100 KiB counts as the whole 64 KiB: not beside another review
		release <- struct{}{}
		wantOK(t, done, "the small review")
		postAsync(s, large, done) // alone, it is served
		<-entered
		want429(t, s, small)
		release <- struct{}{}
		wantOK(t, done, "the large review alone")
	})
}

// A review holds of MaxBytesInFlight what decoding it would take, not its
// bytes alone: 4.5 KB of empty managedFields entries decode into 1,500
// structs. One whose estimate is over twice the bound is refused at once.
func TestServer_chargesAReviewWhatDecodingItWouldTake(t *testing.T) {
	dense := func(entries int) string {
		return review(gadgetKind, `{"metadata":{"name":"g","managedFields":[`+strings.Repeat(`{},`, entries)+`{}]}}`)
	}
	s, entered, release := blocking(t, webhook.Limits{MaxBytesInFlight: 1 << 20})
	done := make(chan int, 1)
	postAsync(s, dense(1500), done) // ~0.8 MB decoded
	<-entered
	want429(t, s, dense(1500)) // its bytes would fit a thousand times; what it decodes into does not
	release <- struct{}{}
	wantOK(t, done, "the first dense review")

	req := httptest.NewRequest(http.MethodPost, validatePath, strings.NewReader(dense(5000)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "more than twice Limits.MaxBytesInFlight") {
		t.Fatalf("a review of 15 KB that would take 2.5 MB decoded, alone: answered %d %q, want 413", rec.Code, rec.Body)
	}
}

func TestServer_endsAHandlersContextAtRequestTimeout(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: t.TempDir(),
		Limits: webhook.Limits{RequestTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	err = webhook.AddValidator(s, webhook.Validator[*v2.Gadget]{Create: func(ctx context.Context, _ *v2.Gadget) (webhook.Warnings, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, s, validatePath, "application/json", review(gadgetKind, `{"metadata":{"name":"g"}}`))
	if code != http.StatusOK || !strings.Contains(body, `"allowed":false`) || !strings.Contains(body, webhook.ErrRequestTimeout.Error()) {
		t.Fatalf("answered %d %q, want a denial saying %q", code, body, webhook.ErrRequestTimeout)
	}
}

func TestServer_refusesReviewsOfAnotherVersion(t *testing.T) {
	s := newServer(t, defaultGadget)
	v1 := review(gadgetKind, `{"metadata":{"name":"g"}}`)
	for _, tc := range []struct {
		name, path, body, says string
	}{
		{"an admission.k8s.io/v1beta1 AdmissionReview", validatePath,
			strings.Replace(v1, `"admission.k8s.io/v1"`, `"admission.k8s.io/v1beta1"`, 1),
			`apiVersion "admission.k8s.io/v1beta1" kind "AdmissionReview"; this server answers admission.k8s.io/v1 AdmissionReview only`},
		{"an AdmissionReview without apiVersion", mutatePath, strings.Replace(v1, `"apiVersion":"admission.k8s.io/v1",`, ``, 1),
			`apiVersion "" kind "AdmissionReview"`},
		{"a ConversionReview sent as an AdmissionReview", validatePath, strings.Replace(v1, `"AdmissionReview"`, `"ConversionReview"`, 1),
			`kind "ConversionReview"; this server answers admission.k8s.io/v1 AdmissionReview only`},
		{"an apiextensions.k8s.io/v1beta1 ConversionReview", webhook.ConvertPath,
			`{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"ConversionReview","request":{"uid":"u",` +
				`"desiredAPIVersion":"gadgets.webhook.ctrlkit.test/v1","objects":[]}}`,
			`this server answers apiextensions.k8s.io/v1 ConversionReview only (set conversionReviewVersions: [v1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, s, tc.path, "application/json", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.says) {
				t.Errorf("answered %d %q, want 400 saying %q", code, body, tc.says)
			}
		})
	}
}

// stalledBody is a request body that hands out sent, then blocks until
// unblock is closed, then fails: a client that declared more than it sent.
// reading is closed once the server has read all it sent.
type stalledBody struct {
	sent             *strings.Reader
	reading, unblock chan struct{}
	once             *sync.Once
}

func newStalledBody(sent string) stalledBody {
	return stalledBody{strings.NewReader(sent), make(chan struct{}), make(chan struct{}), &sync.Once{}}
}

func (b stalledBody) Read(p []byte) (int, error) {
	if b.sent.Len() > 0 {
		return b.sent.Read(p)
	}
	b.once.Do(func() { close(b.reading) })
	<-b.unblock
	return 0, io.ErrUnexpectedEOF
}

// Connections that declare a body and send little or none of it hold only
// what they sent: neither a place among MaxInFlight nor the bytes they
// declared. Beside them, reviews are answered; bytes that did arrive count.
func TestServer_stalledBodiesHoldOnlyWhatTheySent(t *testing.T) {
	small := review(gadgetKind, `{"metadata":{"name":"g"}}`)
	for _, tc := range []struct {
		name     string
		limits   webhook.Limits
		declared []int64 // Content-Length of each stalled request
		sent     int     // bytes each sends before it stalls
	}{
		{"declared bytes beyond MaxBytesInFlight", webhook.Limits{}, []int64{7 << 20, 7 << 20, 2 << 20}, 0},
		{"more stalled requests than MaxInFlight", webhook.Limits{MaxInFlight: 2}, []int64{1, 1, 1, 1, 1}, 0},
		{"part of a body sent", webhook.Limits{MaxBytesInFlight: 2 << 20}, []int64{7 << 20}, 3 << 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, entered, release := blocking(t, tc.limits)
			var stalled sync.WaitGroup
			var bodies []stalledBody
			t.Cleanup(func() {
				for _, b := range bodies {
					close(b.unblock)
				}
				stalled.Wait()
			})
			for _, n := range tc.declared {
				b := newStalledBody(strings.Repeat("x", tc.sent))
				bodies = append(bodies, b)
				req := httptest.NewRequest(http.MethodPost, validatePath, b)
				req.Header.Set("Content-Type", "application/json")
				req.ContentLength = n
				answered := make(chan struct{})
				stalled.Go(func() { s.ServeHTTP(httptest.NewRecorder(), req); close(answered) })
				select {
				case <-b.reading:
				case <-answered:
					t.Fatalf("a request that declared %d bytes was answered before it sent them", n)
				}
			}
			done := make(chan int, 1)
			postAsync(s, small, done)
			select {
			case <-entered:
				release <- struct{}{}
				wantOK(t, done, "a review beside the stalled ones")
			case code := <-done:
				t.Fatalf("a review beside the stalled ones: answered %d, want 200", code)
			}
			if tc.sent > 0 { // what arrived counts: 1.5 MiB held of 2, so 600 KiB more do not fit
				want429(t, s, review(gadgetKind, `{"metadata":{"name":"g","annotations":{"a":"`+strings.Repeat("x", 600<<10)+`"}}}`))
			}
		})
	}
}
