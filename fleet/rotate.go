package fleet

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// swapTransport is an engaged cluster's transport: the one its
// configuration makes, replaced in place when its credentials rotate, so
// that every client holding the cluster's HTTP client (informers, typed
// clients, clientset) uses the new ones from its next request on.
// Every response body but a watch's is bounded by maxBody bytes (0: no
// bound): reading past it fails.
type swapTransport struct {
	rt      atomic.Pointer[http.RoundTripper]
	maxBody int64
}

func newSwapTransport(rt http.RoundTripper, maxBody int64) *swapTransport {
	t := &swapTransport{maxBody: maxBody}
	t.rt.Store(&rt)
	return t
}

func (t *swapTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := (*t.rt.Load()).RoundTrip(r)
	if err == nil && t.maxBody > 0 && resp.Body != nil && !isWatch(r) {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.maxBody, max: t.maxBody}
	}
	return resp, err
}

// isWatch reports whether r opens a watch, whose body is a stream of
// events (each bounded by its decoder), not one answer.
func isWatch(r *http.Request) bool {
	if !strings.Contains(r.URL.RawQuery, "watch") {
		return false // most requests: no query to parse
	}
	switch r.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

// boundedBody fails a read past max bytes.
type boundedBody struct {
	io.ReadCloser
	left, max int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("fleet: a response of more than %d bytes from the cluster's API server (Options.MaxResponseBytes)", b.max)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// CloseIdleConnections closes the idle connections of the current
// transport if it can (as http.Client does: client-go's transports, shared
// by every client of the same server and TLS configuration, close theirs
// after their idle timeout instead).
func (t *swapTransport) CloseIdleConnections() {
	if c, ok := (*t.rt.Load()).(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// swap makes rt the transport: requests in flight on the one it replaces,
// a watch among them, finish on their own; the next ones use rt.
func (t *swapTransport) swap(rt http.RoundTripper) { t.rt.Store(&rt) }

// sameServer reports whether a and b reach the same API server the same
// way (address, path and server trust), so that only their credentials
// may differ.
func sameServer(a, b *rest.Config) bool {
	return a.Host == b.Host && a.APIPath == b.APIPath && a.ServerName == b.ServerName && a.Insecure == b.Insecure &&
		a.CAFile == b.CAFile && bytes.Equal(a.CAData, b.CAData) && a.Proxy == nil && b.Proxy == nil
}

// Update gives the cluster called name the configuration cfg, engaging it
// if it is not engaged. When cfg reaches the same server as before (the
// same address and server trust: rotated credentials), the cluster keeps
// its informers, its cache and its Cluster: only its transport is
// replaced, and every request from then on (a watch when it next starts)
// carries the new credentials. Otherwise it is disengaged and engaged
// again with cfg. The providers call it when a kubeconfig changes.
func (f *Fleet) Update(name string, cfg *rest.Config) error {
	if err := checkName(name); err != nil {
		return err
	}
	cfg = withFleetDefaults(cfg)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("fleet: cluster %s: %w", name, err)
	}
	f.mu.Lock()
	old := f.offered[name]
	if old == nil || !sameServer(old, cfg) {
		f.mu.Unlock()
		if old != nil {
			_ = f.Disengage(name)
		}
		return f.Engage(name, cfg)
	}
	f.offered[name] = cfg
	delete(f.refused, name) // a change refused before is superseded
	m := f.clusters[name]
	f.mu.Unlock()
	if m != nil {
		m.cluster.cfg.Store(cfg)
		m.transport.swap(transportOf(hc))
	}
	return nil
}

// withFleetDefaults returns a copy of cfg with the fleet's defaults: no
// client-side rate limit unless cfg sets one (the cluster's API server
// protects itself with priority and fairness).
func withFleetDefaults(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1 // client-go makes no rate limiter for a negative QPS
	}
	return cfg
}
