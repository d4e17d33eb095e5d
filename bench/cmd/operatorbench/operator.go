package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ctrlkitMetricsAddr is where examples/mirror serves /metrics: fixed in its
// main, so only one ctrlkit operator runs at a time.
const ctrlkitMetricsAddr = ":8080"

// binaries are the two operators' executables.
type binaries struct {
	Ctrlkit, ControllerRuntime string
}

// buildOperators builds, into dir, the binaries not given: examples/mirror in
// the root module (as its README says, with the root module's
// dependencies) and ./crmirror in the bench module. Run from inside the
// bench module.
func buildOperators(ctx context.Context, cfg config, dir string, progress io.Writer) (binaries, error) {
	bins := binaries{Ctrlkit: cfg.CtrlkitBin, ControllerRuntime: cfg.CRBin}
	if bins.Ctrlkit == "" {
		root, err := goOutput(ctx, "list", "-m", "-f", "{{.Dir}}", "github.com/ctrlkit/ctrlkit")
		if err != nil {
			return bins, fmt.Errorf("finding the root module (run from inside bench/): %w", err)
		}
		bins.Ctrlkit = filepath.Join(dir, "mirror")
		fmt.Fprintln(progress, "== go build ./examples/mirror in", root)
		if _, err := goOutput(ctx, "build", "-C", root, "-o", bins.Ctrlkit, "./examples/mirror"); err != nil {
			return bins, err
		}
	}
	if bins.ControllerRuntime == "" {
		bins.ControllerRuntime = filepath.Join(dir, "crmirror")
		fmt.Fprintln(progress, "== go build ./cmd/operatorbench/crmirror")
		if _, err := goOutput(ctx, "build", "-o", bins.ControllerRuntime, "github.com/ctrlkit/ctrlkit/bench/cmd/operatorbench/crmirror"); err != nil {
			return bins, err
		}
	}
	return bins, nil
}

// goOutput runs the go command and returns its trimmed standard output.
func goOutput(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// depVersion is the version of module path a binary was built with, or "?".
func depVersion(bin, path string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "?"
}

// operator is one running operator process.
type operator struct {
	side    string
	metrics string // its /metrics URL
	cmd     *exec.Cmd
	stop    context.CancelFunc // sends SIGTERM; SIGKILL after cmd.WaitDelay
	started time.Time          // just before the process started
	// exited is closed by the goroutine waiting for the process once it
	// has exited; waitErr is valid then.
	exited  chan struct{}
	waitErr error
}

// startOperator starts side's binary against kubeconfig; its output goes to
// progress. Stop it with close.
func startOperator(ctx context.Context, side string, bins binaries, kubeconfig string, progress io.Writer) (*operator, error) {
	o := &operator{side: side, exited: make(chan struct{})}
	var bin string
	var args []string
	switch side {
	case sideCtrlkit:
		// Its address is fixed: refuse to scrape someone else's :8080.
		if err := checkFree(ctrlkitMetricsAddr); err != nil {
			return nil, fmt.Errorf("examples/mirror serves its metrics on %s: %w", ctrlkitMetricsAddr, err)
		}
		bin, o.metrics = bins.Ctrlkit, "http://127.0.0.1:8080/metrics"
	case sideControllerRuntime:
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		bin, o.metrics = bins.ControllerRuntime, "http://"+ports[0]+"/metrics"
		args = []string{"-metrics-bind-address", ports[0], "-health-probe-bind-address", ports[1]}
	default:
		return nil, fmt.Errorf("unknown side %q", side)
	}
	octx, stop := context.WithCancel(ctx)
	o.stop = stop
	o.cmd = exec.CommandContext(octx, bin, args...)
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	o.cmd.Stdout, o.cmd.Stderr = progress, progress
	o.cmd.Cancel = func() error { return o.cmd.Process.Signal(syscall.SIGTERM) }
	o.cmd.WaitDelay = time.Minute
	o.started = time.Now()
	if err := o.cmd.Start(); err != nil {
		stop()
		return nil, err
	}
	go func() {
		o.waitErr = o.cmd.Wait()
		close(o.exited)
	}()
	return o, nil
}

// pid is the process's id.
func (o *operator) pid() int { return o.cmd.Process.Pid }

// close sends SIGTERM, waits for the process to exit (SIGKILL after a
// minute) and returns its resource usage. An exit other than a clean one
// after SIGTERM is an error.
func (o *operator) close() (*syscall.Rusage, error) {
	select {
	case <-o.exited:
		o.stop()
		return o.rusage(), fmt.Errorf("%s operator exited by itself: %v", o.side, o.waitErr)
	default:
	}
	o.stop()
	<-o.exited
	if ps := o.cmd.ProcessState; ps == nil || !ps.Success() {
		return o.rusage(), fmt.Errorf("%s operator did not stop cleanly on SIGTERM: %v", o.side, o.waitErr)
	}
	return o.rusage(), nil
}

// rusage is the exited process's resource usage, or an empty one.
func (o *operator) rusage() *syscall.Rusage {
	if ps := o.cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			return ru
		}
	}
	return &syscall.Rusage{}
}

// alive returns an error if the process has exited.
func (o *operator) alive() error {
	select {
	case <-o.exited:
		return fmt.Errorf("%s operator exited: %v", o.side, o.waitErr)
	default:
		return nil
	}
}

// idlePoll is waitIdle's period.
const idlePoll = 50 * time.Millisecond

// waitIdle polls /metrics every 50 ms until two scrapes in a row find
// every one of live objects reconciled, nothing queued or in a worker, and
// no reconcile in between, and returns the first of the two.
func (o *operator) waitIdle(ctx context.Context, hc *http.Client, live int, timeout time.Duration) (scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	var first *scrape // the last scrape, if idle
	var last error
	for {
		if err := o.alive(); err != nil {
			return scrape{}, err
		}
		s, err := scrapeMetrics(ctx, hc, o.metrics)
		if err == nil {
			s.cpu, err = procCPU(o.pid())
		}
		switch {
		case err != nil:
			first, last = nil, err // not listening yet
		case !s.idle(live):
			first = nil
		case first != nil && first.reconciles == s.reconciles:
			return *first, nil
		default:
			first = &s
		}
		select {
		case <-ctx.Done():
			return scrape{}, fmt.Errorf("%s operator not idle with %d objects reconciled after %v (last scrape error: %v)", o.side, live, timeout, last)
		case <-t.C:
		}
	}
}

// waitMetrics polls /metrics every 50 ms until it answers.
func (o *operator) waitMetrics(ctx context.Context, hc *http.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	for {
		if err := o.alive(); err != nil {
			return err
		}
		_, err := scrapeMetrics(ctx, hc, o.metrics)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s operator's %s: %w", o.side, o.metrics, err)
		case <-t.C:
		}
	}
}

// checkFree returns an error if addr is in use.
func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// freePorts returns n loopback addresses free now.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
