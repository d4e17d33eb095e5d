package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/manager"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

// run runs the greeter until ctx ends (Ctrl-C).
func run(ctx context.Context, kubeconfig string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // as kubectl finds its cluster
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	m, err := manager.New(cfg, manager.Options{}) // logs to stderr; /metrics, /healthz, /readyz on 127.0.0.1:8080
	if err != nil {
		return err
	}
	if err := Setup(m, ""); err != nil {
		return err
	}
	return m.Run(ctx) // on Ctrl-C: stop taking work, finish what is in flight, return
}
