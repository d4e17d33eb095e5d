// Command ctrlkit is ctrlkit's command line: it builds and runs the embedded
// Kubernetes API server for local work, and runs the demo.
//
//	ctrlkit demo [--foos N] [--keep]         the Foo controller on the embedded API server, end to end
//	ctrlkit run foo [--kubeconfig PATH]      run the Foo controller against any cluster
//	ctrlkit run podlogger [--kubeconfig PATH] print every Pod change (the seed documents' example)
//	ctrlkit apiserver build                  build the API server binary if this machine has none; print its path
//	ctrlkit apiserver run [flags]            run the API server until interrupted; print a kubeconfig for kubectl
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/podlogger"
	"github.com/ctrlkit/ctrlkit/manager"
)

const usage = `usage:
  ctrlkit demo [--foos N] [--keep]                   the Foo controller on the embedded API server, end to end
  ctrlkit run foo [--kubeconfig PATH] [--namespace]  run the Foo controller against any cluster
  ctrlkit run podlogger [--kubeconfig PATH] [--namespace]  print every Pod change (the seed's example)
  ctrlkit apiserver build                            build the API server binary if needed and print its path
  ctrlkit apiserver run [flags]                      run the API server until interrupted
`

// envRunAsCLI, set in the environment, makes a test binary of this package
// behave as the ctrlkit command (the demo's replicas exec themselves).
const envRunAsCLI = "CTRLKIT_RUN_AS_CLI"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ctrlkit:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) >= 2 && args[0] == "apiserver" && args[1] == "build":
		bin, err := apiserver.Binary(stderr)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, bin)
		return nil
	case len(args) >= 2 && args[0] == "apiserver" && args[1] == "run":
		return runAPIServer(ctx, args[2:], stdout, stderr)
	case len(args) >= 1 && args[0] == "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case len(args) >= 2 && args[0] == "run" && args[1] == "foo":
		return runFoo(ctx, args[2:], stderr)
	case len(args) >= 2 && args[0] == "run" && args[1] == "podlogger":
		return runPodLogger(ctx, args[2:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args)
	}
}

// runFoo runs the Foo controller against the cluster of a kubeconfig until
// ctx ends (Ctrl-C).
func runFoo(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run foo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	ns := fs.String("namespace", "", "watch one namespace only (default: all)")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:8080", "serve /metrics (and the probes, unless --health-addr) here; 0 turns it off")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on their own address (default: with /metrics)")
	pprof := fs.Bool("pprof", false, "serve net/http/pprof under /debug/pprof/ beside /metrics")
	leaderElect := fs.Bool("leader-elect", false, "reconcile only while holding the Lease foo-controller (informers stay warm on every replica)")
	leaseNS := fs.String("lease-namespace", "default", "namespace of the leader-election Lease")
	identity := fs.String("identity", "", "this replica's name in the Lease (default: host name and a random suffix)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadKubeconfig(*kubeconfig)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("foo controller starting", "server", cfg.Host, "namespace", *ns)
	opts := manager.Options{Logger: log, HTTPAddr: *metricsAddr, HealthAddr: *healthAddr,
		EnablePprof: *pprof, RequireServedKinds: true}
	if *leaderElect {
		opts.LeaderElection = election.Options{Name: "foo-controller", Namespace: *leaseNS, Identity: *identity}
	}
	err = foo.Run(ctx, cfg, *ns, opts)
	if errors.Is(err, manager.ErrKindNotServed) {
		return fmt.Errorf("%w\nthe Foo CRD is not installed; install it with: kubectl apply -f examples/foo/config/crd.yaml", err)
	}
	return err
}

// runPodLogger prints every Pod change of a cluster until ctx ends.
func runPodLogger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run podlogger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	ns := fs.String("namespace", "", "one namespace only (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadKubeconfig(*kubeconfig)
	if err != nil {
		return err
	}
	return podlogger.Run(ctx, cfg, *ns, stdout, manager.Options{HTTPAddr: "0",
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// loadKubeconfig reads path, or the usual places when it is empty.
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// runAPIServer starts the embedded API server, tells how to reach it, and
// stops it cleanly when ctx ends (Ctrl-C).
func runAPIServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apiserver run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "keep etcd data, certificates and the kubeconfig here (default: a temporary folder, removed on exit)")
	noWatchCache := fs.Bool("disable-watch-cache", false, "serve every list and watch from etcd")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "ctrlkit: starting the embedded Kubernetes API server (kube-apiserver + etcd on 127.0.0.1)")
	srv, err := apiserver.Start(ctx, apiserver.Options{
		DataDir: *dataDir, DisableWatchCache: *noWatchCache, Progress: stderr,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "API server ready at %s\n", srv.URL())
	fmt.Fprintf(stdout, "kubeconfig: %s\n", srv.Kubeconfig())
	fmt.Fprintf(stdout, "try:        kubectl --kubeconfig %s get namespaces\n", srv.Kubeconfig())
	fmt.Fprintln(stdout, "Ctrl-C stops the server.")
	<-ctx.Done()
	fmt.Fprintln(stderr, "ctrlkit: stopping the API server")
	return srv.Stop()
}
