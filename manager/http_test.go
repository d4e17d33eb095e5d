package manager_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestManager_httpServerClosesIdleConnectionsAndLimitsRequests(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	const idle = 300 * time.Millisecond
	opts := quiet(t)
	opts.HTTPIdleTimeout = idle
	base := startWithPprof(t, srv, opts)
	addr := strings.TrimPrefix(base, "http://")

	t.Run("an idle keep-alive connection is closed after the idle timeout", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("/healthz: %d, close %v; want 200 on a connection kept alive", resp.StatusCode, resp.Close)
		}
		idleSince := time.Now()
		const bound = 10 * time.Second
		if err := c.SetReadDeadline(idleSince.Add(bound)); err != nil {
			t.Fatal(err)
		}
		_, err = br.ReadByte()
		waited := time.Since(idleSince)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the idle connection was not closed by the server within %s: %v", bound, err)
		}
		if waited < idle/2 {
			t.Errorf("closed after %s, before the idle timeout %s", waited, idle)
		}
	})

	t.Run("headers beyond the limit are refused", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Big", strings.Repeat("a", 256<<10))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 256 KiB header: %d, want 431", resp.StatusCode)
		}
	})

	t.Run("a body beyond the limit is not read", func(t *testing.T) {
		// pprof's symbol lookup reads a POST body of program counters; it
		// reports the reader's error in its answer.
		body := bytes.Repeat([]byte("0x1+"), (2<<20)/4)
		resp, err := client.Post(base+"/debug/pprof/symbol", "text/plain", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(got), "request body too large") {
			t.Errorf("a 2 MiB body: %d %.200q, want the read cut at the limit", resp.StatusCode, got)
		}
	})
}
