package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/bench/scenario"
)

// report is everything the parent measured.
type report struct {
	Command    string
	Config     config
	Rounds     []round
	Compaction compaction
	Chaos      chaos
}

// round is one round's starts: cold ctrlkit, churn, warm ctrlkit, warm
// ctrlkit again with nothing changed since (Quiet), and client-go.
type round struct {
	Cold, Warm, Quiet, ClientGo result
	Churn                       churn
}

// compaction is the warm start after churn, etcd's compaction and a
// server restart: the snapshot's history is gone.
type compaction struct {
	Churn    churn
	Revision int64
	Start    result
}

// chaos is ctrlkit restarts back to back while a writer runs.
type chaos struct {
	Starts          []result
	Changes, Errors int64
}

// bench is the parent's state: the server, its client and the children's
// files.
type bench struct {
	cfg      config
	srv      *apiserver.Server
	cms      typedcorev1.ConfigMapInterface
	exe      string
	work     string // the children's results
	snapDir  string // the ctrlkit children's snapshot folder
	progress io.Writer
	children int
}

// run runs the whole benchmark; progress receives the server's and the
// children's output.
func run(ctx context.Context, cfg config, progress io.Writer) (report, error) {
	b, err := newBench(ctx, cfg, progress)
	if err != nil {
		return report{}, err
	}
	defer b.close()
	rep := report{Config: cfg}
	for r := range cfg.Rounds {
		rd, err := b.round(ctx, r)
		if err != nil {
			return rep, fmt.Errorf("round %d: %w", r+1, err)
		}
		rep.Rounds = append(rep.Rounds, rd)
	}
	if rep.Compaction, err = b.compaction(ctx); err != nil {
		return rep, fmt.Errorf("compaction round: %w", err)
	}
	if rep.Chaos, err = b.chaos(ctx); err != nil {
		return rep, fmt.Errorf("chaos: %w", err)
	}
	return rep, nil
}

// newBench starts the server and creates the ConfigMaps.
func newBench(ctx context.Context, cfg config, progress io.Writer) (*bench, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "warmrestart-")
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, exe: exe, work: work, snapDir: filepath.Join(work, "snapshots"), progress: progress}
	fmt.Fprintf(progress, "== starting the embedded API server and creating %d ConfigMaps\n", cfg.Objects)
	if b.srv, err = apiserver.Start(ctx, apiserver.Options{Progress: progress}); err != nil {
		b.close()
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(b.srv.Config())
	if err == nil {
		_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	}
	if err == nil {
		err = scenario.Populate(ctx, kube, namespace, cfg.Objects)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	b.cms = kube.CoreV1().ConfigMaps(namespace)
	return b, nil
}

// close stops the server and removes the children's files.
func (b *bench) close() {
	if b.srv != nil {
		if err := b.srv.Stop(); err != nil {
			fmt.Fprintln(b.progress, "warmrestart: stopping the server:", err)
		}
	}
	os.RemoveAll(b.work)
}

// round runs one round: cold, churn, warm, warm again with no change in
// between (quiet), client-go.
func (b *bench) round(ctx context.Context, r int) (round, error) {
	var rd round
	if err := os.RemoveAll(b.snapDir); err != nil {
		return rd, err
	}
	var err error
	if rd.Cold, err = b.child(ctx, sideCtrlkit); err != nil {
		return rd, err
	}
	if rd.Churn, err = applyChurn(ctx, b.cms, b.cfg.Objects, fmt.Sprint("r", r)); err != nil {
		return rd, err
	}
	if rd.Warm, err = b.child(ctx, sideCtrlkit); err != nil {
		return rd, err
	}
	if rd.Quiet, err = b.child(ctx, sideCtrlkit); err != nil {
		return rd, err
	}
	rd.ClientGo, err = b.child(ctx, sideClientGo)
	return rd, err
}

// compaction churns, compacts etcd and restarts the server (its watch
// cache then starts after the snapshot), and starts ctrlkit from the last
// snapshot.
func (b *bench) compaction(ctx context.Context) (compaction, error) {
	var c compaction
	var err error
	if c.Churn, err = applyChurn(ctx, b.cms, b.cfg.Objects, "compaction"); err != nil {
		return c, err
	}
	if c.Revision, err = b.srv.Compact(ctx); err != nil {
		return c, err
	}
	fmt.Fprintf(b.progress, "== compacted etcd at revision %d; restarting the server\n", c.Revision)
	if err := b.srv.Restart(ctx); err != nil {
		return c, err
	}
	c.Start, err = b.child(ctx, sideCtrlkit)
	return c, err
}

// chaos restarts ctrlkit cfg.Chaos times back to back while a writer
// changes objects.
func (b *bench) chaos(ctx context.Context) (chaos, error) {
	var c chaos
	if b.cfg.Chaos == 0 {
		return c, nil
	}
	listed, _, err := listAll(ctx, b.cms)
	if err != nil {
		return c, err
	}
	w := newWriter(b.cms, listed, b.cfg.ChaosRate)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(wctx) })
	for range b.cfg.Chaos {
		res, err := b.child(ctx, sideCtrlkit)
		if err != nil {
			stop()
			wg.Wait()
			return c, err
		}
		c.Starts = append(c.Starts, res)
	}
	stop()
	wg.Wait()
	c.Changes, c.Errors = w.changes.Load(), w.errors.Load()
	return c, nil
}

// child runs the binary as a child measuring side and returns its result.
func (b *bench) child(ctx context.Context, side string) (result, error) {
	b.children++
	cc := childConfig{Side: side, Kubeconfig: b.srv.Kubeconfig(), Dir: b.snapDir, Timeout: b.cfg.Timeout,
		Out: filepath.Join(b.work, fmt.Sprintf("child-%d.json", b.children))}
	if b.cfg.Profiles != "" {
		cc.Profile = filepath.Join(b.cfg.Profiles, fmt.Sprintf("child-%d-%s.pprof", b.children, side))
	}
	fmt.Fprintf(b.progress, "== child %d: %s\n", b.children, side)
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.exe, childArgs(cc)...)
	cmd.Stdout, cmd.Stderr = b.progress, b.progress
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("child %s: %w", side, err)
	}
	data, err := os.ReadFile(cc.Out)
	if err != nil {
		return result{}, err
	}
	var res result
	if err := json.Unmarshal(data, &res); err != nil {
		return result{}, fmt.Errorf("child %s's result: %w", side, err)
	}
	fmt.Fprintf(b.progress, "   %s\n", summary(res))
	return res, nil
}
