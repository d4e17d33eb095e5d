package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
)

// standIn plays the one part of kube-controller-manager the demo needs: it
// marks every Deployment's replicas available, so the Foo controller has a
// status to mirror. It is not part of ctrlkit; a real cluster does this.
func standIn(ctx context.Context, kube kubernetes.Interface) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		list, err := kube.AppsV1().Deployments(demoNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			markAvailable(ctx, kube, &list.Items[i])
		}
	}
}

func markAvailable(ctx context.Context, kube kubernetes.Interface, d *appsv1.Deployment) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.AvailableReplicas == want {
		return
	}
	s := &d.Status
	s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas = want, want, want, want
	s.ObservedGeneration = d.Generation
	_, _ = kube.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{}) // a conflict retries next tick
}

// showProgress prints one line a second: cache sync, the workload, queue
// depth, reconciles per second and errors, read from the controller's
// Stats snapshot (the one /debug/ctrlkit shows).
func (d *demo) showProgress(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sync := d.status()
		if d.stats == nil { // the controller runs in the replicas' processes
			fmt.Fprintf(d.out, "  %s | foos created %d, scaled %d, deleted %d\n", sync, d.created.Load(), d.updated.Load(), d.deleted.Load())
			continue
		}
		st := d.stats()
		fmt.Fprintf(d.out, "  %s | foos created %d, scaled %d, deleted %d | queue depth %d | reconciles %d (%d/s) | errors %d\n",
			sync, d.created.Load(), d.updated.Load(), d.deleted.Load(),
			st.Queue.Depth, st.Reconciles, st.Reconciles-last, st.Errors)
		last = st.Reconciles
	}
}

// waitConverged polls until every Foo has its own Deployment at the right
// size and mirrors its availability, or timeout passes, or the controller
// fails. It returns whether it converged and, if not, why.
func (d *demo) waitConverged(ctx context.Context, timeout time.Duration, ctrlErr <-chan error) (bool, string) {
	deadline := time.After(timeout)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		problem := d.problem(ctx)
		if problem == "" {
			return true, ""
		}
		select {
		case err := <-ctrlErr:
			return false, fmt.Sprintf("the controller stopped: %v", err)
		case <-deadline:
			return false, problem
		case <-ctx.Done():
			return false, "interrupted"
		case <-tick.C:
		}
	}
}

// problem names the first Foo that is not converged, or returns "".
func (d *demo) problem(ctx context.Context) string {
	foos, err := d.fooAPI.List(ctx, demoNamespace, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	deps, err := d.kube.AppsV1().Deployments(demoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	byName := map[string]appsv1.Deployment{}
	for _, dep := range deps.Items {
		byName[dep.Name] = dep
	}
	want := d.foos - int(d.deleted.Load())
	if len(foos) != want {
		return fmt.Sprintf("%d Foos, want %d", len(foos), want)
	}
	for _, f := range foos {
		if p := fooProblem(f, byName); p != "" {
			return p
		}
	}
	return ""
}

func fooProblem(f *v1alpha1.Foo, deps map[string]appsv1.Deployment) string {
	dep, ok := deps[f.Spec.DeploymentName]
	switch {
	case !ok:
		return fmt.Sprintf("Foo %s has no Deployment %s", f.Name, f.Spec.DeploymentName)
	case !metav1.IsControlledBy(&dep, f):
		return fmt.Sprintf("Deployment %s is not controlled by Foo %s", dep.Name, f.Name)
	case dep.Spec.Replicas == nil || *dep.Spec.Replicas != *f.Spec.Replicas:
		return fmt.Sprintf("Deployment %s does not have %d replicas", dep.Name, *f.Spec.Replicas)
	case f.Status.AvailableReplicas != *f.Spec.Replicas:
		return fmt.Sprintf("Foo %s status shows %d available, want %d", f.Name, f.Status.AvailableReplicas, *f.Spec.Replicas)
	}
	return ""
}

func (d *demo) summary(ctx context.Context, start time.Time, converged bool, detail string) {
	verdict := "CONVERGED: every Foo has its own Deployment at the right size, and its status mirrors it,"
	if !converged {
		verdict = "NOT CONVERGED: " + detail
	}
	fmt.Fprintf(d.out, "\n%s after %s\n", verdict, time.Since(start).Round(100*time.Millisecond))
	fmt.Fprintf(d.out, "  Foos: %d created, %d scaled, %d deleted, %d remain\n",
		d.created.Load(), d.updated.Load(), d.deleted.Load(), d.created.Load()-d.deleted.Load())
	if d.ring != nil {
		d.ringSummary(ctx)
	}
	if d.stats == nil {
		return // the replicas' state is on their own listeners
	}
	st := d.stats()
	fmt.Fprintf(d.out, "  reconciles: %d (errors %d, of which %d retried with backoff)\n", st.Reconciles, st.Errors, st.Retries)
}
