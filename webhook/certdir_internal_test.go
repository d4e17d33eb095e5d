package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// otherUID is the owner given to files and folders "made by another user".
const otherUID = 65534 // nobody

// asAnotherUser makes path (not following a link) look made by another
// user to s: owned by otherUID when the test runs as root, as the existing
// security tests do; otherwise s takes another uid as its own, so that
// everything the test made is another user's.
func asAnotherUser(t *testing.T, s *Server, path string) {
	t.Helper()
	if os.Getuid() != 0 {
		s.certs.dir.uid = os.Getuid() + 1
		return
	}
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
}

// certServer returns a server reading dir, where SelfSigned wrote a pair.
func certServer(t *testing.T, dir string) *Server {
	t.Helper()
	if _, err := SelfSigned(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// outside returns a directory beside the test's certificate directory
// holding a valid pair.
func outside(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if _, err := SelfSigned(d, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCertDir_refusesWhatAnotherUserCouldChange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s *Server, dir string)
		says  string
	}{
		{"a directory of another user", func(t *testing.T, s *Server, dir string) { asAnotherUser(t, s, dir) },
			"is owned by uid"},
		{"a sticky directory of another user", func(t *testing.T, s *Server, dir string) {
			chmod(t, dir, 0o777|fs.ModeSticky)
			asAnotherUser(t, s, dir)
		}, "is owned by uid"},
		{"a world-writable directory", func(t *testing.T, _ *Server, dir string) { chmod(t, dir, 0o777) },
			`is writable by other users (mode drwxrwxrwx): they could plant or swap the serving certificate; run "chmod go-w`},
		{"a group-writable directory", func(t *testing.T, _ *Server, dir string) { chmod(t, dir, 0o770) },
			"is writable by other users (mode drwxrwx---)"},
		{"a directory inside one that others can write", func(t *testing.T, _ *Server, dir string) { chmod(t, filepath.Dir(dir), 0o777) },
			"where another user could rename or replace it"},
		{"a key of another user", func(t *testing.T, s *Server, dir string) { asAnotherUser(t, s, filepath.Join(dir, "tls.key")) },
			"is owned by uid"},
		{"a world-writable certificate", func(t *testing.T, _ *Server, dir string) { chmod(t, filepath.Join(dir, "tls.crt"), 0o666) },
			"tls.crt is writable by other users"},
		{"a key linked out of the directory", func(t *testing.T, _ *Server, dir string) {
			relink(t, filepath.Join(outside(t), "tls.key"), filepath.Join(dir, "tls.key"))
		}, "leads out of the certificate directory"},
		{"a key linked to /dev/zero", func(t *testing.T, _ *Server, dir string) {
			relink(t, "/dev/zero", filepath.Join(dir, "tls.key"))
		}, "tls.key -> /dev/zero); only links that stay inside it are followed"},
		{"a link that climbs out and back", func(t *testing.T, _ *Server, dir string) {
			relink(t, "../"+filepath.Base(dir)+"/tls.crt", filepath.Join(dir, "tls.key"))
		}, "leads out of the certificate directory"},
		{"a FIFO as the key", func(t *testing.T, _ *Server, dir string) { fifo(t, filepath.Join(dir, "tls.key")) },
			"is not a regular file"},
		{"a certificate of 2 MiB", func(t *testing.T, _ *Server, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "tls.crt"), bytes.Repeat([]byte("A"), 2<<20), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			s := certServer(t, dir)
			tc.setup(t, s, dir)
			err := s.Ready()
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Ready: %v, want it to say %q", err, tc.says)
			}
		})
	}
}

// A Secret volume, as kubelet writes one: a tmpfs, mode 1777 (3777 with an
// fsGroup), owned by root; the files in a timestamped directory, mode 0755,
// behind ..data; the names links to ..data/NAME. Its update swaps ..data.
func TestCertDir_servesASecretVolume(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode fs.FileMode
	}{
		{"mode 1777", 0o777 | fs.ModeSticky},
		{"mode 3777, with an fsGroup", 0o777 | fs.ModeSticky | fs.ModeSetgid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "serving-certs")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			chmod(t, dir, tc.mode)
			first := secretVersion(t, dir, "..2026_01_01_00_00_00.1")
			for _, name := range []string{"tls.crt", "tls.key"} {
				if err := os.Symlink("..data/"+name, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := NewServer(Options{CertDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Ready(); err != nil {
				t.Fatalf("Ready: %v", err)
			}
			if got := served(t, s); !bytes.Equal(got, first) {
				t.Fatal("the first version is not served")
			}
			second := secretVersion(t, dir, "..2026_01_02_00_00_00.2")
			if got := served(t, s); !bytes.Equal(got, second) {
				t.Fatal("the second version is not served after ..data moved to it")
			}
			for _, name := range []string{"tls.crt", "tls.key"} { // absolute links, inside
				relink(t, filepath.Join(dir, "..2026_01_01_00_00_00.1", name), filepath.Join(dir, name))
			}
			if got := served(t, s); !bytes.Equal(got, first) {
				t.Fatal("absolute links inside the directory are not followed")
			}
		})
	}
}

// secretVersion writes a new pair into dir/ts, as kubelet does, points
// dir/..data at it, and returns the certificate's DER.
func secretVersion(t *testing.T, dir, ts string) []byte {
	t.Helper()
	src := t.TempDir()
	if _, err := SelfSigned(src, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, name), b, 0o644); err != nil { // a Secret's defaultMode
			t.Fatal(err)
		}
	}
	relink(t, ts, filepath.Join(dir, "..data"))
	pair, err := tls.LoadX509KeyPair(filepath.Join(src, "tls.crt"), filepath.Join(src, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	return pair.Certificate[0]
}

// served returns the DER of the certificate s serves now.
func served(t *testing.T, s *Server) []byte {
	t.Helper()
	c, err := s.certs.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Certificate[0]
}

// When the files change into something the server refuses, handshakes go
// on with the last good certificate, at once, and the failure is reported.
func TestCertWatcher_keepsTheLastGoodCertificateWhenANewOneIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		says  string
	}{
		{"a FIFO as the key", func(t *testing.T, dir string) { fifo(t, filepath.Join(dir, "tls.key")) }, "is not a regular file"},
		{"a key linked to /dev/zero", func(t *testing.T, dir string) { relink(t, "/dev/zero", filepath.Join(dir, "tls.key")) },
			"leads out of the certificate directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			dir := t.TempDir()
			ca, err := SelfSigned(dir, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewServer(Options{CertDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, s)
			first := handshake(t, addr, ca)
			tc.spoil(t, dir)
			if got := handshake(t, addr, ca); !bytes.Equal(got, first) {
				t.Fatal("the handshake after the files were spoiled did not serve the last good certificate")
			}
			if err := s.Ready(); err != nil {
				t.Errorf("Ready: %v, want nil while the last good certificate is served", err)
			}
			if st := s.Stats().Certificate; !strings.Contains(st.Err, tc.says) {
				t.Errorf("Stats().Certificate.Err = %q, want it to say %q", st.Err, tc.says)
			}
		})
	}
}

// serve runs s.Serve on loopback until the test ends.
func serve(t *testing.T, s *Server) string {
	t.Helper()
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
	return ln.Addr().String()
}

// handshake completes a TLS handshake with addr, trusting ca, within ten
// seconds, and returns the certificate served.
func handshake(t *testing.T, addr string, ca []byte) []byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// relink points the link at path to target, replacing what path was.
func relink(t *testing.T, target, path string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// fifo replaces path with a named pipe that nobody writes.
func fifo(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServe_failsAtOnceWithoutATrustedCertificate(t *testing.T) {
	dir := t.TempDir()
	s := certServer(t, dir)
	chmod(t, dir, 0o777)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Serve(t.Context(), ln)
	if err == nil || !strings.Contains(err.Error(), "is writable by other users") {
		t.Fatalf("Serve: %v, want the directory refused", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener is still open: Accept: %v", err)
	}
}

func TestCertWatcher_anExpiredCertificateIsNotReady(t *testing.T) {
	s := certServer(t, t.TempDir())
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	later := time.Now().AddDate(2, 0, 0) // SelfSigned's certificate is valid for a year
	if err := s.certs.expired(later); err == nil || !strings.Contains(err.Error(), "the serving certificate expired at") {
		t.Fatalf("expired two years on: %v, want an error", err)
	}
}
