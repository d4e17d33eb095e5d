package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/certs"
)

// certWatcher serves the certificate in a directory, read again at the
// first handshake after either file changed (a Secret volume swaps both
// through a symlink, an operator rewrites them in place). A stat of two
// files per handshake is all it costs: no goroutine, no timer. A pair is
// read only from a directory and files no other user could have changed,
// and never blocks (see certdir.go). A pair that does not load (say, half
// written, or refused) keeps the last good one in service.
type certWatcher struct {
	dir               certDir
	certName, keyName string
	certFile, keyFile string // in dir
	log               *slog.Logger
	metrics           *metrics

	mu       sync.Mutex
	seen     [2]fileID
	cert     *tls.Certificate
	loadedAt time.Time
	err      error // of the last read, when no pair has loaded since
	lastErr  error // of the last read, nil once one succeeded since
	// src, if set, gives the certificate instead of the directory
	// (Options.Certificate).
	src func() (*tls.Certificate, error)
}

// fileID tells one version of a file from another.
type fileID struct {
	ino, size int64
	mtime     time.Time
}

func newCertWatcher(dir, cert, key string, log *slog.Logger, m *metrics) *certWatcher {
	return &certWatcher{dir: certDir{path: dir, uid: os.Getuid()}, certName: cert, keyName: key, certFile: filepath.Join(dir, cert),
		keyFile: filepath.Join(dir, key), log: log, metrics: m}
}

// get returns the current certificate, reading the files again when they
// changed since the last read, or asking src when set.
func (c *certWatcher) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.src != nil {
		return c.fromSource()
	}
	ids, statErr := statPair(c.certFile, c.keyFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if statErr == nil && ids == c.seen && (c.cert != nil || c.err != nil) {
		return c.result()
	}
	c.seen = ids
	pair, err := c.dir.load(c.certName, c.keyName)
	c.metrics.certLoaded(err)
	c.lastErr = err
	if err != nil {
		err = fmt.Errorf("webhook: serving certificate: %w", err)
		c.lastErr = err
		if c.cert != nil {
			c.log.Error("webhook: reading the serving certificate failed; serving the last good one", "err", err)
		} else {
			c.log.Error("webhook: reading the serving certificate failed; no certificate to serve", "err", err)
		}
		if c.cert == nil {
			c.err = err
		}
		return c.result()
	}
	c.cert, c.err, c.loadedAt = &pair, nil, time.Now()
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
		c.log.Info("webhook: serving certificate loaded", "subject", leaf.Subject.String(), "dns", leaf.DNSNames,
			"notAfter", leaf.NotAfter)
	}
	return c.result()
}

// fromSource returns src's certificate, noting a new one as a load.
func (c *certWatcher) fromSource() (*tls.Certificate, error) {
	cert, err := c.src()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.lastErr = fmt.Errorf("webhook: serving certificate: %w", err)
		if c.cert == nil {
			c.err = c.lastErr
		}
		return c.result()
	}
	if cert != c.cert {
		if cert.Leaf == nil && len(cert.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
				cert.Leaf = leaf
			}
		}
		c.cert, c.err, c.lastErr, c.loadedAt = cert, nil, nil, time.Now()
		c.metrics.certLoaded(nil)
		if cert.Leaf != nil {
			c.log.Info("webhook: serving certificate loaded", "subject", cert.Leaf.Subject.String(), "dns", cert.Leaf.DNSNames,
				"notAfter", cert.Leaf.NotAfter)
		}
	}
	return c.cert, nil
}

// expired returns an error when the certificate served has expired by now.
func (c *certWatcher) expired(now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert == nil || c.cert.Leaf == nil || !now.After(c.cert.Leaf.NotAfter) {
		return nil
	}
	why := "no new one was written"
	if c.lastErr != nil {
		why = "the new one does not load: " + c.lastErr.Error()
	}
	return fmt.Errorf("webhook: the serving certificate expired at %s; %s", c.cert.Leaf.NotAfter.Format(time.RFC3339), why)
}

func (c *certWatcher) result() (*tls.Certificate, error) {
	if c.cert != nil {
		return c.cert, nil
	}
	return nil, c.err
}

// statPair identifies the current versions of both files.
func statPair(a, b string) ([2]fileID, error) {
	var ids [2]fileID
	for i, p := range []string{a, b} {
		fi, err := os.Stat(p)
		if err != nil {
			return ids, err
		}
		ids[i] = fileID{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ids[i].ino = int64(st.Ino)
		}
	}
	return ids, nil
}

// SelfSigned makes a new certificate authority and a serving certificate
// it signs for hosts (DNS names or IP addresses), writes the serving pair
// to dir as tls.crt and tls.key (mode 0600, replacing them atomically),
// and returns the authority's certificate, PEM encoded: the caBundle of
// the webhook configurations. It is for tests and demos; in a cluster a
// certificate manager issues the pair. ECDSA P-256, valid for a year.
func SelfSigned(dir string, hosts ...string) (caPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("webhook: SelfSigned needs at least one host")
	}
	now := time.Now()
	ca, caKey, err := certs.NewCA("ctrlkit webhook CA", now, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := certs.Serving(ca, caKey, hosts, now, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, "tls.key"), keyPEM); err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, "tls.crt"), certPEM); err != nil {
		return nil, err
	}
	return certs.CertPEM(ca.Raw), nil
}

// writeAtomic writes data to path through a temporary file and a rename,
// so a reader sees the old file or the new one, never a part.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("webhook: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}
