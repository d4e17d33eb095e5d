package apiserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// echoServer answers every line with the same line until the client leaves.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); _, _ = io.Copy(c, c) })
		}
	})
	return l.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q = %q, %v", msg, got, err)
	}
}

func TestProxy_forwardsCutsStallsAndLeaksNothing(t *testing.T) {
	leakcheck.Check(t)
	p, err := newProxy(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	t.Run("bytes flow both ways", func(t *testing.T) {
		c, r := dialProxy(t, p)
		roundTrip(t, c, r, "hello")
	})

	t.Run("stall holds bytes until resume", func(t *testing.T) {
		c, r := dialProxy(t, p)
		roundTrip(t, c, r, "before")
		p.Stall()
		if _, err := io.WriteString(c, "held\n"); err != nil {
			t.Fatal(err)
		}
		// Absence can only be shown over a window; a slow machine can make
		// this pass wrongly, never fail wrongly.
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if got, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read while stalled = %q, %v; want a deadline error", got, err)
		}
		p.Resume()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
			t.Fatalf("after resume got %q, %v; want the held line", got, err)
		}
	})

	t.Run("a connection opened while stalled is forwarded after resume", func(t *testing.T) {
		p.Stall()
		c, r := dialProxy(t, p)
		if _, err := io.WriteString(c, "late\n"); err != nil {
			t.Fatal(err)
		}
		p.Resume()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := r.ReadString('\n'); err != nil || got != "late\n" {
			t.Fatalf("got %q, %v", got, err)
		}
	})

	t.Run("cut closes every open connection, stalled or not", func(t *testing.T) {
		var readers []*bufio.Reader
		var conns []net.Conn
		for range 3 {
			c, r := dialProxy(t, p)
			roundTrip(t, c, r, "up")
			conns, readers = append(conns, c), append(readers, r)
		}
		p.Stall()
		if n := p.Cut(); n < 3 {
			t.Fatalf("Cut() = %d, want at least 3", n)
		}
		p.Resume()
		for i, r := range readers {
			_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("conn %d: read after cut = %v, want EOF or reset", i, err)
			}
		}
		c, r := dialProxy(t, p)
		roundTrip(t, c, r, "new connections still work")
	})

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("dial after Close succeeded")
	}
}

func TestNamespaceName_isAValidUniqueDNSLabel(t *testing.T) {
	for _, tc := range []struct{ name, test string }{
		{"plain", "TestFoo"},
		{"subtest with spaces and slashes", "TestFoo/a_b c//d"},
		{"very long", "TestAVeryLongTestNameThatGoesOnAndOnAndOnPastSixtyThreeCharacters/and_a_subtest"},
		{"only symbols", "///"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := namespaceName(tc.test), namespaceName(tc.test)
			if a == b {
				t.Errorf("two names for %q are equal: %s", tc.test, a)
			}
			if len(a) > 63 || !dnsLabel(a) {
				t.Errorf("namespaceName(%q) = %q: not a DNS label", tc.test, a)
			}
		})
	}
}

func dnsLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
