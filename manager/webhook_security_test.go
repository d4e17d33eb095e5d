package manager_test

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
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// The manager serves its webhooks with the webhook package's server, so
// its listener keeps the limits of Options.Webhook.Limits (the body's read
// deadline, the idle timeout) and the webhook TLS configuration.
func TestManager_webhookListenerKeepsTheWebhookLimits(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	dir := t.TempDir()
	ca, err := webhook.SelfSigned(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	opts := quiet(t)
	opts.Webhook = webhook.Options{Addr: "127.0.0.1:0", CertDir: dir, Name: "manager-limits-" + ns,
		Limits: webhook.Limits{BodyTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
		Create: func(context.Context, *corev1.ConfigMap) (webhook.Warnings, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	eventually(t, 10*time.Second, "/readyz answers 200", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })
	addr := m.WebhookAddr(t.Context())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}

	t.Run("a stalled body is cut at BodyTimeout", func(t *testing.T) {
		conn, br := dialWebhook(t, addr, cfg)
		fmt.Fprintf(conn, "POST /validate--v1-configmap HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"+
			"Content-Length: 1000\r\n\r\n{")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("answered %s, want 408", resp.Status)
		}
		wantServerClosed(t, br)
	})

	t.Run("an idle keep-alive connection is closed at IdleTimeout", func(t *testing.T) {
		conn, br := dialWebhook(t, addr, cfg)
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
		wantServerClosed(t, br)
	})

	t.Run("a CBC-SHA1 suite is refused", func(t *testing.T) {
		c := cfg.Clone()
		c.MaxVersion = tls.VersionTLS12
		c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, c)
		if err == nil {
			conn.Close()
			t.Fatal("the handshake offering only CBC-SHA1 suites succeeded")
		}
	})

	// Last: it spoils the certificate directory.
	t.Run("a refused new key keeps the last good certificate and /readyz?verbose says why", func(t *testing.T) {
		key := filepath.Join(dir, "tls.key")
		if err := os.Remove(key); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(key, 0o600); err != nil {
			t.Fatal(err)
		}
		conn, _ := dialWebhook(t, addr, cfg) // the handshake reads the files again, and still succeeds
		conn.Close()
		code, body := get(t, base+"/readyz?verbose")
		if code != http.StatusOK || !strings.Contains(body, "serving the last good certificate") {
			t.Errorf("/readyz?verbose = %d\n%s\nwant 200 naming the refused certificate", code, body)
		}
	})
}

// dialWebhook opens an HTTP/1.1 TLS connection to addr, closed when the
// test ends, whose reads fail after ten seconds.
func dialWebhook(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// wantServerClosed fails unless the server closes the connection before
// the client's deadline.
func wantServerClosed(t *testing.T, br *bufio.Reader) {
	t.Helper()
	_, err := br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		t.Fatal("the server sent more, want the connection closed")
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatal("the connection was still open after 10s")
	case !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset"):
		t.Fatalf("%v, want the connection closed", err)
	}
}
