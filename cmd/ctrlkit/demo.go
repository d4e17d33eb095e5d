package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

const demoNamespace = "demo"

// errNotConverged makes the demo exit non-zero.
var errNotConverged = errors.New("demo: the cluster did not converge")

// demo is one run of "ctrlkit demo".
type demo struct {
	out              io.Writer
	foos             int
	kube             kubernetes.Interface
	fooAPI           *client.Client[*v1alpha1.Foo]
	status           func() string                              // the controller's state for the progress line
	stats            func() controller.Stats[object.ObjectName] // nil with --replicas
	procs            map[string]*os.Process                     // with --replicas, by identity
	ring             []*replica                                 // with --shards, in identity order
	killed           chan struct{}                              // with --shards: closed once the kill and its handoff are over
	handoff          time.Duration                              // with --shards: from the kill until its shards moved; set before killed closes
	created, updated atomic.Int64
	deleted          atomic.Int64
	restart          *restart // the single-process controller, which the demo restarts
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("foos", 300, "how many Foos to create")
	keep := fs.Bool("keep", false, "leave the API server and controller running afterwards, for kubectl")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for convergence")
	replicas := fs.Int("replicas", 1, "run the controller as this many processes (ctrlkit run foo --leader-elect); 1 runs it in this process")
	killLeader := fs.Bool("kill-leader", false, "with --replicas: SIGKILL the leading replica when half the Foos exist")
	shards := fs.Bool("shards", false, "with --replicas 2 or more: the replicas share the Foos in a ring of Leases (run foo --shard-ring) instead of electing a leader; the one holding the most shards is SIGKILLed when half the Foos exist")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case *shards && *replicas < 2:
		return usageError(fs, errors.New("--shards needs --replicas 2 or more"))
	case *shards && *killLeader:
		return usageError(fs, errors.New("--kill-leader is for leader election; with --shards a replica is killed anyway"))
	}
	fmt.Fprintln(stdout, "ctrlkit demo: the Foo sample controller on a real, embedded Kubernetes API server")
	fmt.Fprintln(stdout, "starting the API server (kube-apiserver + etcd on 127.0.0.1)...")
	srv, err := apiserver.Start(ctx, apiserver.Options{Progress: stdout})
	if err != nil {
		return err
	}
	defer srv.Stop()
	cfg := srv.Config()
	if err := apiserver.InstallCRDs(ctx, cfg, config.CRDs); err != nil {
		return err
	}
	d, err := newDemo(ctx, cfg, stdout, *n)
	if err != nil {
		return err
	}
	var cacheDir string // removed once every goroutine below ended: the informers write snapshots there as they stop
	defer func() {
		if cacheDir != "" {
			os.RemoveAll(cacheDir)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: every goroutine below ends with ctx
	defer cancel()
	ctrlErr := make(chan error, 1)
	var m *manager.Manager
	showHooks := func() error { return nil } // the webhooks run in this process only
	if *replicas > 1 {
		if err := d.startReplicas(ctx, &wg, srv.Kubeconfig(), *replicas, *shards, ctrlErr); err != nil {
			return err
		}
		if *shards {
			d.status = func() string { return d.ringStatus(ctx) }
			d.killed = make(chan struct{})
			wg.Go(func() { d.killReplicaHalfway(ctx) })
		}
		if *killLeader {
			wg.Go(func() { d.killLeaderHalfway(ctx) })
		}
	} else {
		hooks, hookOpts, err := newDemoWebhooks()
		if err != nil {
			return err
		}
		defer hooks.close()
		if cacheDir, err = os.MkdirTemp("", "ctrlkit-demo-cache-"); err != nil {
			return err
		}
		d.restart = &restart{cfg: cfg, cacheDir: cacheDir, logs: stderr, ctrlErr: ctrlErr, wg: &wg}
		if m, err = d.startController(ctx, &hookOpts); err != nil {
			return err
		}
		if err := hooks.register(m); err != nil {
			return err
		}
		showHooks = func() error { return d.showWebhooks(ctx, cfg, m, hooks) }
		d.restart.run()
	}
	wg.Go(func() { standIn(ctx, d.kube) })
	progressCtx, stopProgress := context.WithCancel(ctx)
	var progress sync.WaitGroup
	progress.Go(func() { d.showProgress(progressCtx) })

	if d.ring != nil {
		err = d.waitForRing(ctx, *timeout, ctrlErr)
	}
	if err == nil {
		err = showHooks()
	}
	start := time.Now()
	if err == nil {
		err = d.workload(ctx)
	}
	if err == nil && d.killed != nil {
		<-d.killed // convergence is checked after the handoff
	}
	converged, detail := false, ""
	if err == nil {
		converged, detail = d.waitConverged(ctx, *timeout, ctrlErr)
	}
	stopProgress()
	progress.Wait() // the progress lines end before the summary starts
	if err != nil {
		return err
	}
	d.summary(ctx, start, converged, detail)
	if converged && d.restart != nil {
		if m, err = d.showRestart(ctx, *timeout); err != nil {
			return err
		}
	}
	if *keep && converged {
		fmt.Fprintf(stdout, "\nstill running; try: kubectl --kubeconfig %s -n %s get foos,deployments\n", srv.Kubeconfig(), demoNamespace)
		if m != nil {
			fmt.Fprintf(stdout, "the controller's live pipeline page: http://%s/debug/ctrlkit\n", m.Addr(ctx))
			fmt.Fprintf(stdout, "its metrics and probes: http://%s/metrics /healthz /readyz\n", m.Addr(ctx))
		}
		fmt.Fprintln(stdout, "Ctrl-C stops.")
		<-ctx.Done()
	}
	if !converged {
		return errNotConverged
	}
	return nil
}

func newDemo(ctx context.Context, cfg *rest.Config, out io.Writer, n int) (*demo, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	foos, err := newFooClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return &demo{out: &lockedWriter{w: out}, foos: n, kube: kube, fooAPI: foos}, nil
}

// newFooClient returns a typed client of Foos outside a manager (with
// --replicas the controller runs in other processes), made of what a
// manager would give it.
func newFooClient(cfg *rest.Config, hc *http.Client) (*client.Client[*v1alpha1.Foo], error) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	d, err := listwatch.NewDiscovery(cfg, hc, s)
	if err != nil {
		return nil, err
	}
	return client.New[*v1alpha1.Foo](d, s), nil
}

func fooName(i int) string { return fmt.Sprintf("foo-%04d", i) }

// workload creates every Foo, then changes the replicas of every third and
// deletes every tenth, with 8 concurrent clients.
func (d *demo) workload(ctx context.Context) error {
	steps := []struct {
		what string
		do   func(ctx context.Context, i int) error
		skip func(i int) bool
	}{
		{"create", d.create, func(int) bool { return false }},
		{"scale", d.scale, func(i int) bool { return i%3 != 0 }},
		{"delete", d.delete, func(i int) bool { return i%10 != 0 }},
	}
	for _, s := range steps {
		if err := parallel(ctx, d.foos, 8, func(i int) error {
			if s.skip(i) {
				return nil
			}
			return s.do(ctx, i)
		}); err != nil {
			return fmt.Errorf("demo: %s: %w", s.what, err)
		}
	}
	return nil
}

func (d *demo) create(ctx context.Context, i int) error {
	r := int32(1 + i%3)
	f := &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: fooName(i), Namespace: demoNamespace},
		Spec: v1alpha1.FooSpec{DeploymentName: fooName(i) + "-web", Replicas: &r}}
	_, err := d.fooAPI.Create(ctx, f, metav1.CreateOptions{})
	if err == nil {
		d.created.Add(1)
	}
	return err
}

// scale adds 2 to a Foo's replicas. The controller may write the Foo's
// status between the read and the update; a conflict reads it again.
func (d *demo) scale(ctx context.Context, i int) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		f, err := d.fooAPI.Get(ctx, object.ObjectName{Namespace: demoNamespace, Name: fooName(i)})
		if err != nil {
			return err
		}
		r := *f.Spec.Replicas + 2
		f.Spec.Replicas = &r
		_, err = d.fooAPI.Update(ctx, f, metav1.UpdateOptions{})
		return err
	})
	if err == nil {
		d.updated.Add(1)
	}
	return err
}

func (d *demo) delete(ctx context.Context, i int) error {
	err := d.fooAPI.Delete(ctx, object.ObjectName{Namespace: demoNamespace, Name: fooName(i)}, metav1.DeleteOptions{})
	if err == nil {
		d.deleted.Add(1)
	}
	return err
}

// parallel runs do(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, do func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
loop:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs // nil when the channel is empty
	}
	return err
}

// lockedWriter serialises the demo's lines: the progress line and the
// replica killer write from their own goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
