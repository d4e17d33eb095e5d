//go:build !race

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
)

// The controllers of kube-controller-manager this binary can run beside
// the API server (--controllers).
const (
	garbageCollector    = "garbagecollector"
	namespaceController = "namespace"
)

// parseControllers checks a --controllers value: a comma-separated list of
// garbagecollector and namespace, or empty.
func parseControllers(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, c := range strings.Split(s, ",") {
		switch c = strings.TrimSpace(c); c {
		case garbageCollector, namespaceController:
			out = append(out, c)
		default:
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s, %s)", c, garbageCollector, namespaceController)
		}
	}
	return out, nil
}

// startControllers runs kube-controller-manager's garbage collector (owner
// references cascade: a deleted owner's dependents are deleted, in the
// background, foreground or orphaned as the delete asked) and namespace
// controller (a deleted namespace's objects are deleted and the namespace
// goes), the same code as a cluster runs, against the server of kubeconfig,
// until ctx ends. It is called once the server is ready.
func startControllers(ctx context.Context, kubeconfig string, which []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400 // each deletion takes two requests; a test's cascade should not wait on a client limit
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	typed := informers.NewSharedInformerFactory(kube, 0)
	factory := informerfactory.NewInformerFactory(typed, metadatainformer.NewSharedInformerFactory(md, 0))
	started := make(chan struct{})
	for _, c := range which {
		switch c {
		case garbageCollector:
			// The mapper's discovery is not the one Sync reads: Sync resets
			// the mapper when resources appear (a CRD installed by a test).
			mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
			gc, err := garbagecollector.NewGarbageCollector(ctx, kube, md, mapper, garbagecollector.DefaultIgnoredResources(),
				factory, started)
			if err != nil {
				return fmt.Errorf("garbage collector: %w", err)
			}
			go gc.Run(ctx, 5, 30*time.Second)
			go gc.Sync(ctx, kube.Discovery(), 5*time.Second) // a CRD installed later is collected within 5s
		case namespaceController:
			nc := namespacecontroller.NewNamespaceController(ctx, kube, md, kube.Discovery().ServerPreferredNamespacedResources,
				typed.Core().V1().Namespaces(), 5*time.Minute, corev1.FinalizerKubernetes)
			go nc.Run(ctx, 5)
		}
	}
	factory.Start(ctx.Done())
	close(started)
	fmt.Fprintln(os.Stderr, "ctrlkit-apiserver: running controllers:", strings.Join(which, ", "))
	return nil
}
