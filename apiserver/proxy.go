package apiserver

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"k8s.io/client-go/rest"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a server, for fault
// injection: Cut drops every open connection at once (a network partition
// or a load balancer reset, as the client sees it), and Stall keeps
// connections open but lets no byte through until Resume (a black hole).
// It forwards raw TCP, so TLS runs end to end between client and server.
//
// Its methods are safe for concurrent use. Close stops it and waits for all
// of its goroutines.
type Proxy struct {
	l      net.Listener
	target string
	base   *rest.Config // may be nil; see Config

	// mu guards links, stalled, resume and closed. Invariants: resume is
	// open exactly while stalled is true; once closed, links only shrinks.
	mu      sync.Mutex
	links   map[*link]struct{}
	stalled bool
	resume  chan struct{}
	closed  bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

// link is one client connection and its connection to the target.
type link struct {
	client net.Conn
	done   chan struct{} // closed by close

	mu       sync.Mutex // guards upstream and closed
	upstream net.Conn   // nil until dialled
	closed   bool       // Invariant: closed == (done is closed)
}

// setUpstream records the dialled connection; false if l was cut meanwhile.
func (l *link) setUpstream(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.upstream = c
	return true
}

func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.done)
	up := l.upstream
	l.mu.Unlock()
	l.client.Close()
	if up != nil {
		up.Close()
	}
}

// NewProxy starts a proxy in front of the server. Use its Config to reach
// the server through it. Close it when done.
func (s *Server) NewProxy() (*Proxy, error) {
	cfg := s.Config()
	s.mu.Lock()
	target := s.info.Server
	s.mu.Unlock()
	u, err := hostPort(target)
	if err != nil {
		return nil, err
	}
	return newProxy(u, cfg)
}

func newProxy(target string, base *rest.Config) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("apiserver: proxy: %w", err)
	}
	p := &Proxy{l: l, target: target, base: base, links: map[*link]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Config returns the server's admin configuration pointed at the proxy. The
// server's certificate is valid for 127.0.0.1, so TLS verification holds.
func (p *Proxy) Config() *rest.Config {
	cfg := rest.CopyConfig(p.base)
	cfg.Host = "https://" + p.Addr()
	return cfg
}

// Cut closes every open connection, both ways, and returns how many there
// were. New connections are accepted as usual.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Stall stops all traffic: open connections stay open but pass no bytes,
// and new connections are accepted but not forwarded, until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled, p.resume = true, make(chan struct{})
	}
}

// Resume lets stalled traffic flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines to exit.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.l.Close()
	p.Resume()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // listener closed
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.links[l] = struct{}{}
		}
		p.mu.Unlock()
		if closed { // accepted while Close ran: Cut has not seen it
			c.Close()
			return
		}
		p.wg.Go(func() { p.serve(l) })
	}
}

// serve dials the target for l and copies both ways until either side ends.
func (p *Proxy) serve(l *link) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if !p.waitFlowing(l) {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !l.setUpstream(up) { // cut while dialling
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, up, l.client) })
	wg.Go(func() { p.pipe(l, l.client, up) })
	wg.Wait()
}

// pipe copies src to dst, holding each chunk while the proxy is stalled.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitFlowing(l) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitFlowing blocks while the proxy is stalled; false means l was cut.
func (p *Proxy) waitFlowing(l *link) bool {
	p.mu.Lock()
	stalled, resume := p.stalled, p.resume
	p.mu.Unlock()
	if stalled {
		select {
		case <-resume:
		case <-l.done:
			return false
		}
	}
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

func hostPort(serverURL string) (string, error) {
	const prefix = "https://"
	if len(serverURL) <= len(prefix) || serverURL[:len(prefix)] != prefix {
		return "", errors.New("apiserver: proxy: server URL is not https: " + serverURL)
	}
	return serverURL[len(prefix):], nil
}
