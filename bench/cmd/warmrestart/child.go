package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/listwatch"
)

// The sides a child measures.
const (
	sideCtrlkit  = "ctrlkit"
	sideClientGo = "client-go"
)

// namespace holds the ConfigMaps measured.
const namespace = "bench"

// result is what a child measured, written as JSON for the parent.
type result struct {
	Side string `json:"side"`
	// Warm, Reason and SnapshotObjects are ctrlkit's Start().
	Warm            bool   `json:"warm"`
	Reason          string `json:"reason,omitempty"`
	SnapshotObjects int    `json:"snapshot_objects"`
	// SyncMS is the time from the informer's start to HasSynced; Bytes
	// and Requests are the response body bytes (decompressed) and
	// requests the child received from the API server in that time,
	// WireBytes the bytes read from its connections (TLS, compressed
	// responses as sent); SyncCPUMS is the
	// process's CPU time in it.
	SyncMS    float64 `json:"sync_ms"`
	Bytes     int64   `json:"bytes"`
	WireBytes int64   `json:"wire_bytes"`
	Requests  int64   `json:"requests"`
	SyncCPUMS float64 `json:"sync_cpu_ms"`
	// Heard counts the handler's notifications up to the convergence check.
	Heard heard `json:"heard"`
	// Cached is the cache's size, Divergent the keys on which the cache
	// and a fresh LIST disagree after up to 10 s of catching up.
	Cached    int      `json:"cached"`
	Divergent []string `json:"divergent"`
	// Snapshot is the ctrlkit child's snapshot write at shutdown.
	Snapshot writeCost `json:"snapshot"`
}

// heard counts handler notifications by kind.
type heard struct {
	InitialAdds int64 `json:"initial_adds"`
	Adds        int64 `json:"adds"`
	Updates     int64 `json:"updates"`
	Deletes     int64 `json:"deletes"`
}

// newAdds is the number of adds the handler heard beyond the snapshot's
// objects (those of the initial list included).
func (r result) newAdds() int64 {
	return r.Heard.InitialAdds + r.Heard.Adds - int64(r.SnapshotObjects)
}

// writeCost is one snapshot write: the informer's SnapshotStats, the time
// from cancelling the informer to Run's return and the CPU time in it.
type writeCost struct {
	Writes   int     `json:"writes"`
	Objects  int     `json:"objects"`
	Bytes    int64   `json:"bytes"`
	WriteMS  float64 `json:"write_ms"`
	PauseMS  float64 `json:"pause_ms"`
	StopMS   float64 `json:"stop_ms"`
	CPUMS    float64 `json:"cpu_ms"`
	Err      string  `json:"err,omitempty"`
	Failures int     `json:"failures"`
}

// childConfig is a child's command line.
type childConfig struct {
	Side, Kubeconfig, Dir, Out string
	Timeout                    time.Duration
	Profile                    string // optional: where to write the sync's CPU profile
}

// childArgs renders c as the child's command line, -child first.
func childArgs(c childConfig) []string {
	return []string{"-child", c.Side, "-kubeconfig", c.Kubeconfig, "-dir", c.Dir, "-out", c.Out, "-timeout", c.Timeout.String(),
		"-cpuprofile", c.Profile}
}

// childMain runs a child: it measures one start and writes the result to
// -out. It returns the exit code.
func childMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("warmrestart -child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c childConfig
	fs.StringVar(&c.Side, "child", "", "ctrlkit or client-go")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "the API server's kubeconfig")
	fs.StringVar(&c.Dir, "dir", "", "the snapshot folder (ctrlkit)")
	fs.StringVar(&c.Out, "out", "", "the JSON result file")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "bound on the sync")
	fs.StringVar(&c.Profile, "cpuprofile", "", "write the sync's CPU profile here")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	err := checkChild(c)
	if err == nil {
		err = runChild(context.Background(), c)
	}
	if err != nil {
		fmt.Fprintf(stderr, "warmrestart child %s: %v\n", c.Side, err)
		return 1
	}
	return 0
}

func checkChild(c childConfig) error {
	switch {
	case c.Side != sideCtrlkit && c.Side != sideClientGo:
		return fmt.Errorf("-child %q: want %s or %s", c.Side, sideCtrlkit, sideClientGo)
	case c.Kubeconfig == "" || c.Out == "":
		return errors.New("-kubeconfig and -out are required")
	case c.Side == sideCtrlkit && c.Dir == "":
		return errors.New("-dir is required for ctrlkit")
	}
	return nil
}

// runChild measures one start of c.Side and writes the result.
func runChild(ctx context.Context, c childConfig) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg = listwatch.PreferProtobuf(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	counter := &byteCounter{profile: c.Profile}
	cfg.Wrap(counter.wrap)
	cfg.Dial = counter.dial
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var res result
	if c.Side == sideCtrlkit {
		res, err = runCtrlkit(ctx, kube, cfg, c, counter)
	} else {
		res, err = runClientGo(ctx, kube, c, counter)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(c.Out, b, 0o600)
}

// byteCounter counts, while it is on, the response body bytes and the
// requests of a client and the bytes read from its connections.
type byteCounter struct {
	on                   atomic.Bool
	bytes, wire, request atomic.Int64
	profile              string // optional: the meter's CPU profile
}

// dial is a rest.Config dialer whose connections count what they read.
func (c *byteCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

// countingConn counts what is read from a connection.
type countingConn struct {
	net.Conn
	c *byteCounter
}

func (cc *countingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if cc.c.on.Load() {
		cc.c.wire.Add(int64(n))
	}
	return n, err
}

// wrap is a rest.Config transport wrapper.
func (c *byteCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if c.on.Load() {
			c.request.Add(1)
		}
		resp, err := rt.RoundTrip(req)
		if resp != nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, c: c}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingBody counts what is read from a response body (after the
// transport's decompression, if the server compressed it).
type countingBody struct {
	io.ReadCloser
	c *byteCounter
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.c.on.Load() {
		b.c.bytes.Add(int64(n))
	}
	return n, err
}

// meter measures a sync: wall time, CPU time, bytes and requests, and
// with a profile path its CPU profile.
type meter struct {
	c       *byteCounter
	start   time.Time
	cpu     time.Duration
	profile *os.File
}

// startMeter turns the counter on and notes the time.
func startMeter(c *byteCounter) *meter {
	m := &meter{c: c}
	if c.profile != "" {
		f, err := os.Create(c.profile)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "warmrestart child: no CPU profile: %v\n", err)
		} else {
			m.profile = f
		}
	}
	c.on.Store(true)
	m.start, m.cpu = time.Now(), cpuTime()
	return m
}

// synced turns the counter off and records the sync into res.
func (m *meter) synced(res *result) {
	res.SyncMS = ms(time.Since(m.start))
	m.c.on.Store(false)
	res.SyncCPUMS = ms(cpuTime() - m.cpu)
	if m.profile != nil { // after the figures: writing the profile is not the sync's
		pprof.StopCPUProfile()
		m.profile.Close()
	}
	res.Bytes, res.WireBytes, res.Requests = m.c.bytes.Load(), m.c.wire.Load(), m.c.request.Load()
}

// waitSynced polls synced every millisecond until it is true.
func waitSynced(ctx context.Context, timeout time.Duration, synced func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !synced() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not synced after %v", timeout)
		case <-t.C:
		}
	}
	return nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
