package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

// report is everything measured.
type report struct {
	Command string
	Config  config
	Rounds  []round
	// Versions names what each operator was built with.
	Versions map[string]string
}

// round is one round's runs: each side once, the A/A side a second time.
type round struct {
	Ctrlkit, ControllerRuntime, AA result
	Order                          []string
}

// side returns the round's first run of side.
func (r round) side(s string) result {
	if s == sideCtrlkit {
		return r.Ctrlkit
	}
	return r.ControllerRuntime
}

// result is what one run of one side measured.
type result struct {
	Side string
	// WorkloadMS is the time the parent's writes took (creates, then
	// paced changes), ConvergeMS the time from their end to the start of
	// the LIST that found every Secret right.
	WorkloadMS, ConvergeMS float64
	// Live counts the labelled ConfigMaps at the end (with the probe);
	// Orphans the Secrets the operator wrote for a ConfigMap already
	// deleted, which the collector deleted.
	Live, Orphans int
	// Over the workload (its start to convergence): the operator's CPU,
	// its API requests (rest_client_requests_total) and the API server's
	// CPU.
	CPUMS, Requests, ServerCPUMS float64
	// PeakRSSKB is the workload process's maximum resident set (rusage).
	PeakRSSKB int64
	// The restart over the converged objects: from the process's start to
	// every object reconciled and the queue idle, and the requests and CPU
	// of the new process in that time.
	RestartMS, RestartRequests, RestartCPUMS float64
}

// bench is the parent's state.
type bench struct {
	cfg      config
	srv      *apiserver.Server
	kube     kubernetes.Interface
	hc       *http.Client // scrapes the operators' /metrics
	bins     binaries
	work     string // the built binaries
	progress io.Writer
	runs     int // runs so far, naming their namespaces
}

// run runs the whole benchmark; progress receives the build's, the
// server's and the operators' output.
func run(ctx context.Context, cfg config, progress io.Writer) (report, error) {
	b, err := newBench(ctx, cfg, progress)
	if err != nil {
		return report{}, err
	}
	defer b.close()
	rep := report{Config: cfg, Versions: map[string]string{
		sideCtrlkit: "client-go " + depVersion(b.bins.Ctrlkit, "k8s.io/client-go"),
		sideControllerRuntime: "controller-runtime " + depVersion(b.bins.ControllerRuntime, "sigs.k8s.io/controller-runtime") +
			", client-go " + depVersion(b.bins.ControllerRuntime, "k8s.io/client-go"),
	}}
	for r := range cfg.Rounds {
		rd, err := b.round(ctx, r)
		if err != nil {
			return rep, fmt.Errorf("round %d: %w", r+1, err)
		}
		rep.Rounds = append(rep.Rounds, rd)
	}
	return rep, nil
}

// newBench builds the operators and starts the server.
func newBench(ctx context.Context, cfg config, progress io.Writer) (*bench, error) {
	work, err := os.MkdirTemp("", "operatorbench-")
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, work: work, progress: progress, hc: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	if b.bins, err = buildOperators(ctx, cfg, work, progress); err != nil {
		b.close()
		return nil, err
	}
	fmt.Fprintln(progress, "== starting the embedded API server")
	if b.srv, err = apiserver.Start(ctx, apiserver.Options{Progress: progress}); err != nil {
		b.close()
		return nil, err
	}
	rc := b.srv.Config()
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if b.kube, err = kubernetes.NewForConfig(rc); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// close stops the server and removes the binaries built.
func (b *bench) close() {
	if b.srv != nil {
		if err := b.srv.Stop(); err != nil {
			fmt.Fprintln(b.progress, "operatorbench: stopping the server:", err)
		}
	}
	b.hc.CloseIdleConnections()
	os.RemoveAll(b.work)
}

// round runs each side once and the A/A side again, on the same plan:
// ctrlkit first in odd rounds (counting from 1), last in even ones.
func (b *bench) round(ctx context.Context, r int) (round, error) {
	rd := round{Order: []string{sideCtrlkit, sideControllerRuntime, b.cfg.AA}}
	if r%2 == 1 {
		rd.Order = []string{b.cfg.AA, sideControllerRuntime, sideCtrlkit}
	}
	p := newPlan(b.cfg, b.cfg.Seed+uint64(r))
	seen := map[string]bool{}
	for _, side := range rd.Order {
		fmt.Fprintf(b.progress, "== round %d/%d: %s\n", r+1, b.cfg.Rounds, side)
		res, err := b.run(ctx, side, p)
		if err != nil {
			return rd, fmt.Errorf("%s: %w", side, err)
		}
		fmt.Fprintf(b.progress, "   %+v\n", res)
		switch {
		case seen[side]:
			rd.AA = res
		case side == sideCtrlkit:
			rd.Ctrlkit = res
		default:
			rd.ControllerRuntime = res
		}
		seen[side] = true
	}
	return rd, nil
}

// run measures one side on p in fresh namespaces, with the collector
// running: the workload, then the restart; then it deletes the run's
// objects.
func (b *bench) run(ctx context.Context, side string, p plan) (result, error) {
	b.runs++
	nss, err := createNamespaces(ctx, b.kube, fmt.Sprintf("ob%d", b.runs), b.cfg.Namespaces)
	if err != nil {
		return result{}, err
	}
	gc, err := newCollector(ctx, b.kube)
	if err != nil {
		return result{}, err
	}
	// A failing collector fails the run rather than leave it to time out.
	rctx, failRun := context.WithCancelCause(ctx)
	defer failRun(nil)
	gctx, stopGC := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gc.run(gctx); err != nil {
			failRun(err)
		}
	})
	w := newWorkload(b.kube, nss)
	res, err := b.workload(rctx, side, w, p)
	if err == nil {
		err = b.restart(rctx, side, &res)
	}
	stopGC()
	wg.Wait()
	res.Orphans = gc.Orphans
	if cause := context.Cause(rctx); err != nil && cause != nil {
		err = cause
	}
	if cerr := w.cleanUp(ctx); err == nil {
		err = cerr
	}
	return res, err
}

// workload starts the operator, waits for it to mirror a probe ConfigMap,
// runs p, waits for convergence and stops the operator.
func (b *bench) workload(ctx context.Context, side string, w *workload, p plan) (result, error) {
	res := result{Side: side}
	op, err := startOperator(ctx, side, b.bins, b.srv.Kubeconfig(), b.progress)
	if err != nil {
		return res, err
	}
	err = b.measureWorkload(ctx, op, w, p, &res)
	ru, cerr := op.close()
	res.PeakRSSKB = ru.Maxrss
	if err == nil {
		err = cerr
	}
	return res, err
}

// counters are the operator's and the server's figures at one moment.
type counters struct {
	cpu, serverCPU time.Duration
	requests       float64
}

// readCounters reads op's and the server's CPU and op's request count.
func (b *bench) readCounters(ctx context.Context, op *operator) (counters, error) {
	var c counters
	s, err := scrapeMetrics(ctx, b.hc, op.metrics)
	if err != nil {
		return c, err
	}
	c.requests = s.requests
	if c.cpu, err = procCPU(op.pid()); err != nil {
		return c, err
	}
	c.serverCPU, err = procCPU(b.srv.PID())
	return c, err
}

// measureWorkload runs p against the running op and records what it cost
// into res.
func (b *bench) measureWorkload(ctx context.Context, op *operator, w *workload, p plan, res *result) error {
	if err := op.waitMetrics(ctx, b.hc, b.cfg.Timeout); err != nil {
		return err
	}
	probe, err := w.createOne(ctx, w.nss[0], "probe")
	if err != nil {
		return err
	}
	if err := waitMirrored(ctx, b.kube, probe, op.alive, b.cfg.Timeout); err != nil {
		return err
	}
	before, err := b.readCounters(ctx, op)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := w.create(ctx, p); err != nil {
		return err
	}
	if err := w.changeAll(ctx, p, b.cfg.Rate); err != nil {
		return err
	}
	end := time.Now()
	res.WorkloadMS = ms(end.Sub(start))
	conv, err := converge(ctx, b.kube, w.expected(), op.alive, b.cfg.Timeout)
	if err != nil {
		return err
	}
	res.ConvergeMS, res.Live = ms(conv.At.Sub(end)), conv.Live
	after, err := b.readCounters(ctx, op)
	if err != nil {
		return err
	}
	res.CPUMS, res.ServerCPUMS = ms(after.cpu-before.cpu), ms(after.serverCPU-before.serverCPU)
	res.Requests = after.requests - before.requests
	return nil
}

// restart starts side's operator again over the converged objects and
// measures its way to idle.
func (b *bench) restart(ctx context.Context, side string, res *result) error {
	op, err := startOperator(ctx, side, b.bins, b.srv.Kubeconfig(), b.progress)
	if err != nil {
		return err
	}
	s, err := op.waitIdle(ctx, b.hc, res.Live, b.cfg.Timeout)
	if _, cerr := op.close(); err == nil {
		err = cerr
	}
	res.RestartMS, res.RestartRequests, res.RestartCPUMS = ms(s.at.Sub(op.started)), s.requests, ms(s.cpu)
	return err
}
