// Command ctrlkit is ctrlkit's command line: it builds and runs the embedded
// Kubernetes API server for local work, and runs the demo.
//
//	ctrlkit apiserver build       build the API server binary if this machine has none; print its path
//	ctrlkit apiserver run [flags] run the API server until interrupted; print a kubeconfig for kubectl
//	ctrlkit demo                  run the demo (today: the embedded API server, see README.md)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

const usage = `usage:
  ctrlkit apiserver build          build the API server binary if needed and print its path
  ctrlkit apiserver run [flags]    run the API server until interrupted
  ctrlkit demo                     run the demo
`

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
		return runAPIServer(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args)
	}
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
