package webhook

import (
	"crypto/x509"
	"slices"
	"sync"
	"time"
)

// Stats is a snapshot of the server: its certificate and each webhook's
// counts since the process started.
type Stats struct {
	// Certificate describes the certificate served now.
	Certificate CertificateStats
	// Webhooks are the registered webhooks, by path.
	Webhooks []WebhookStats
}

// CertificateStats describes the serving certificate.
type CertificateStats struct {
	// Subject and DNSNames/IPs of the certificate served; NotAfter when
	// it expires; LoadedAt when it was read from disk.
	Subject  string
	Hosts    []string
	NotAfter time.Time
	LoadedAt time.Time
	// Err is why no certificate is served, or why the last read of a new
	// one failed (the previous one is still served); "" when all is well.
	Err string
}

// WebhookStats counts one webhook's requests.
type WebhookStats struct {
	// Path is where it is served; Type "validating", "mutating" or
	// "conversion"; Kind its group, version and kind ("" for conversion,
	// which serves every converted kind).
	Path, Type, Kind string
	// Requests counts the requests answered; Rejections those denied;
	// Errors those answered with an HTTP error (4xx, 5xx); Panics the
	// handler's panics (each also an error).
	Requests, Rejections, Errors, Panics int64
	// LastError is the last HTTP error's message, at LastErrorAt.
	LastError   string
	LastErrorAt time.Time
}

// counts are the mutable part of one webhook's WebhookStats.
type counts struct {
	mu sync.Mutex
	WebhookStats
}

func (c *counts) record(code int, rejected, panicked bool, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Requests++
	if rejected {
		c.Rejections++
	}
	if panicked {
		c.Panics++
	}
	if code >= 400 {
		c.Errors++
		c.LastError, c.LastErrorAt = msg, time.Now()
	}
}

// Stats returns a snapshot of the server.
func (s *Server) Stats() Stats {
	var out Stats
	s.mu.Lock()
	for _, c := range s.counts {
		c.mu.Lock()
		out.Webhooks = append(out.Webhooks, c.WebhookStats)
		c.mu.Unlock()
	}
	s.mu.Unlock()
	slices.SortFunc(out.Webhooks, func(a, b WebhookStats) int {
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
	})
	out.Certificate = s.certs.stats()
	return out
}

// stats describes the certificate served.
func (c *certWatcher) stats() CertificateStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out CertificateStats
	if c.lastErr != nil {
		out.Err = c.lastErr.Error()
	}
	if c.cert == nil {
		return out
	}
	out.LoadedAt = c.loadedAt
	if leaf, err := x509.ParseCertificate(c.cert.Certificate[0]); err == nil {
		out.Subject, out.NotAfter = leaf.Subject.String(), leaf.NotAfter
		out.Hosts = append(out.Hosts, leaf.DNSNames...)
		for _, ip := range leaf.IPAddresses {
			out.Hosts = append(out.Hosts, ip.String())
		}
	}
	return out
}
