// Package podlogger is the seed documents' own example, written with
// ctrlkit: an informer on Pods (steps 1–6), a handler that enqueues each
// changed Pod's key (step 7), and a worker that takes keys from the queue
// (step 8), reads the Pod's current state from the cache (step 9) and prints
// it, or that the Pod no longer exists.
package podlogger

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/store"
)

// Logger prints the current state of each Pod whose key it is given.
type Logger struct {
	pods *store.Indexer[*corev1.Pod]
	out  io.Writer // written by one worker only
}

// Reconcile is the seed's syncToStdout: the key's Pod as the cache has it now.
func (l *Logger) Reconcile(_ context.Context, key string) (controller.Result, error) {
	pod, ok := l.pods.GetByKey(key)
	if !ok {
		fmt.Fprintf(l.out, "Pod %s does not exist anymore\n", key)
		return controller.Result{}, nil
	}
	fmt.Fprintf(l.out, "Sync/Add/Update for Pod %s, phase %q, labels %v\n", pod.Name, pod.Status.Phase, pod.Labels)
	return controller.Result{}, nil
}

// Run logs the Pods of namespace ("" for all) to out until ctx ends.
func Run(ctx context.Context, kube kubernetes.Interface, namespace string, out io.Writer) error {
	pods := kube.CoreV1().Pods(namespace)
	lw := listwatch.New[*corev1.Pod](pods.List, pods.Watch, listwatch.Options{})
	logger := &Logger{out: out}
	// As in the seed: a key that keeps failing is retried 5 times, then dropped.
	ctrl, err := controller.New[string](logger, controller.Options[string]{Name: "podlogger", MaxRetries: 5})
	if err != nil {
		return err
	}
	indexer, inf, err := informer.NewIndexerInformer(lw, handler.EnqueueKey[*corev1.Pod](ctrl, nil), informer.Options[*corev1.Pod]{Name: "pods"})
	if err != nil {
		return err
	}
	logger.pods = indexer
	ctrl.WaitFor("pods", inf.HasSynced)

	errs := make(chan error, 2)
	go func() { errs <- inf.Run(ctx) }()
	go func() { errs <- ctrl.Run(ctx, 1) }() // one worker: lines are printed one at a time
	err = <-errs
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}
