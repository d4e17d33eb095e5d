package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// restart is the demo's single-process controller: a manager with a cache
// directory, which the demo stops and starts again to show a warm restart.
type restart struct {
	cfg      *rest.Config
	cacheDir string
	logs     io.Writer
	ctrlErr  chan error
	wg       *sync.WaitGroup
	m        *manager.Manager
	stop     context.CancelFunc // stops m
	run      func()             // runs m
}

// startController makes the Foo controller's manager, with the webhooks of
// hookOpts (nil: none), keeping its caches in the demo's cache directory;
// run starts it.
func (d *demo) startController(ctx context.Context, hookOpts *webhook.Options) (*manager.Manager, error) {
	r := d.restart
	opts := manager.Options{Registry: prometheus.NewRegistry(), HTTPAddr: "127.0.0.1:0", CacheDir: r.cacheDir,
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Logger:      slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if hookOpts != nil {
		opts.Webhook = *hookOpts
	}
	m, err := manager.New(r.cfg, opts)
	if err != nil {
		return nil, err
	}
	ctrl, err := foo.Setup(m, "", manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}})
	if err != nil {
		return nil, err
	}
	d.stats = ctrl.Stats
	d.status = func() string {
		if ctrl.HasSynced() {
			return "caches synced"
		}
		return "syncing caches"
	}
	mctx, stop := context.WithCancel(ctx)
	r.m, r.stop = m, stop
	r.run = func() { r.wg.Go(func() { r.ctrlErr <- m.Run(mctx) }) }
	return m, nil
}

// showRestart stops the controller (its caches write their snapshots),
// deletes some Deployments while it is down, starts it again and shows its
// caches starting warm and the Deployments coming back.
func (d *demo) showRestart(ctx context.Context, timeout time.Duration) (*manager.Manager, error) {
	r := d.restart
	if err := r.m.Webhooks().Uninstall(ctx, r.cfg); err != nil { // this process stops serving them
		return nil, err
	}
	r.stop()
	if err := <-r.ctrlErr; err != nil {
		return nil, fmt.Errorf("demo: stopping the controller: %w", err)
	}
	gone, err := d.deleteSomeDeployments(ctx, 5)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(d.out, "\nrestart: the controller stopped (its caches wrote snapshots to %s); %d Deployments were deleted while it was down\n", r.cacheDir, gone)
	m, err := d.startController(ctx, nil)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	r.run()
	foos := manager.Informer[*v1alpha1.Foo](m, manager.Scope{})
	deps := manager.Informer[*appsv1.Deployment](m, manager.Scope{})
	if err := waitSynced(ctx, timeout, foos, deps); err != nil {
		return nil, err
	}
	fmt.Fprintf(d.out, "  started again, caches synced in %s: Foos %s; Deployments %s\n",
		time.Since(began).Round(time.Millisecond), foos.CacheStart(), deps.CacheStart())
	converged, detail := d.waitConverged(ctx, timeout, r.ctrlErr)
	if !converged {
		return nil, fmt.Errorf("%w after the restart: %s", errNotConverged, detail)
	}
	fmt.Fprintf(d.out, "CONVERGED again after %s: the deleted Deployments are back\n", time.Since(began).Round(100*time.Millisecond))
	return m, nil
}

// deleteSomeDeployments deletes up to n of the Foos' Deployments.
func (d *demo) deleteSomeDeployments(ctx context.Context, n int) (int, error) {
	l, err := d.kube.AppsV1().Deployments(demoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	gone := 0
	for _, dep := range l.Items {
		if gone == n || !strings.HasSuffix(dep.Name, "-web") {
			continue
		}
		if err := d.kube.AppsV1().Deployments(demoNamespace).Delete(ctx, dep.Name, metav1.DeleteOptions{}); err != nil {
			return gone, err
		}
		gone++
	}
	return gone, nil
}

// waitSynced waits until every informer has synced.
func waitSynced(ctx context.Context, timeout time.Duration, infs ...interface{ HasSynced() bool }) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for _, inf := range infs {
		for !inf.HasSynced() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-deadline:
				return fmt.Errorf("%w: the caches did not sync after the restart", errNotConverged)
			case <-tick.C:
			}
		}
	}
	return nil
}
