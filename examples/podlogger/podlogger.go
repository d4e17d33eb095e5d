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
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// Logger prints the current state of each Pod whose name it is given.
type Logger struct {
	pods store.Reader[*corev1.Pod]
	out  io.Writer // written by one worker only
}

// Reconcile is the seed's syncToStdout: the named Pod as the cache has it now.
func (l *Logger) Reconcile(_ context.Context, name object.ObjectName) (controller.Result, error) {
	pod, ok := l.pods.Get(name)
	if !ok {
		fmt.Fprintf(l.out, "Pod %s does not exist anymore\n", name)
		return controller.Result{}, nil
	}
	fmt.Fprintf(l.out, "Sync/Add/Update for Pod %s, phase %q, labels %v\n", pod.Name, pod.Status.Phase, pod.Labels)
	return controller.Result{}, nil
}

// Run logs the Pods of namespace ("" for all) to out until ctx ends: the
// manager's shared informer is steps 1–6 (NewIndexerInformer in the seed),
// For enqueues each changed Pod's name (step 7) and one worker takes names
// from the queue (step 8) and reads the Pod from the cache (step 9).
func Run(ctx context.Context, cfg *rest.Config, namespace string, out io.Writer, opts manager.Options) error {
	m, err := manager.New(cfg, opts)
	if err != nil {
		return err
	}
	pods := manager.Informer[*corev1.Pod](m, manager.Scope{Namespace: namespace})
	// As in the seed: a key that keeps failing is retried 5 times, then
	// dropped; one worker, so lines are printed one at a time.
	_, err = manager.NewController(m, "podlogger", &Logger{pods: pods.Reader(), out: out},
		manager.ControllerOptions{Options: controller.Options[object.ObjectName]{MaxRetries: 5, Workers: 1}}, manager.For(pods))
	if err != nil {
		return err
	}
	return m.Run(ctx)
}
