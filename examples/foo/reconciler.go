// Package foo is the sample controller: each Foo owns a Deployment named by
// spec.deploymentName with spec.replicas replicas, and mirrors the
// Deployment's available replicas into its status.
package foo

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// Event reasons, as they appear in "kubectl describe foo".
const (
	ReasonSynced       = "Synced"
	ReasonCreated      = "DeploymentCreated"
	ReasonScaled       = "DeploymentScaled"
	ReasonNotOwned     = "ErrResourceExists"
	ReasonInvalid      = "InvalidFoo"
	messageNotOwnedFmt = "Deployment %q already exists and is not managed by Foo %q"
	messageSynced      = "Foo synced successfully"
	fooKind            = "Foo"
)

// The writes and reads of the Reconciler, generated into config/rbac/role.yaml
// (the ClusterRole foo-controller), which Run checks at start:
//
// +kubebuilder:rbac:groups=samplecontroller.ctrlkit.dev,resources=foos,verbs=get;list;watch
// +kubebuilder:rbac:groups=samplecontroller.ctrlkit.dev,resources=foos/status,verbs=update
// +kubebuilder:rbac:groups=samplecontroller.ctrlkit.dev,resources=foos/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler makes a Foo's Deployment match its spec and its status match
// the Deployment. It reads Foos and Deployments from caches and writes
// through the clients: Deployments through the clientset, the Foo's status
// through a typed client (manager.Client).
type Reconciler struct {
	Foos        store.Reader[*v1alpha1.Foo]
	Deployments store.Reader[*appsv1.Deployment]
	Kube        kubernetes.Interface
	FooClient   *client.Client[*v1alpha1.Foo]
	Recorder    record.EventRecorder
}

// Reconcile implements controller.Reconciler for the Foo called name.
func (r *Reconciler) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	ns := name.Namespace
	foo, ok := r.Foos.Get(name)
	if !ok {
		return controller.Result{}, nil // deleted: its Deployment is garbage-collected through the owner reference
	}
	if errs := validation.IsValidLabelValue(foo.Name); len(errs) > 0 {
		// The CRD refuses such names; a Foo created under an older CRD
		// can still have one. Retrying cannot fix it: say so and stop.
		return controller.Result{}, r.invalid(ctx, foo, fmt.Sprintf("the name of Foo %q cannot label its Deployment's "+
			"Pods: %s; re-create the Foo under a shorter name", foo.Name, errs[0]))
	}
	dep, ok := r.Deployments.Get(object.ObjectName{Namespace: ns, Name: foo.Spec.DeploymentName})
	if !ok {
		return controller.Result{}, r.create(ctx, foo)
	}
	if !metav1.IsControlledBy(dep, foo) {
		msg := fmt.Sprintf(messageNotOwnedFmt, dep.Name, foo.Name)
		r.Recorder.Event(foo, corev1.EventTypeWarning, ReasonNotOwned, msg)
		return controller.Result{}, r.setStatus(ctx, foo, 0, msg) // a change to either object queues the Foo again
	}
	if want := replicas(foo); dep.Spec.Replicas == nil || *dep.Spec.Replicas != want {
		scaled := dep.DeepCopy()
		scaled.Spec.Replicas = &want
		if _, err := r.Kube.AppsV1().Deployments(ns).Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
			return controller.Result{}, fmt.Errorf("scale deployment %s/%s: %w", ns, dep.Name, err)
		}
		r.Recorder.Eventf(foo, corev1.EventTypeNormal, ReasonScaled, "Scaled Deployment %q to %d", dep.Name, want)
	}
	return controller.Result{}, r.setStatus(ctx, foo, dep.Status.AvailableReplicas, "")
}

func (r *Reconciler) create(ctx context.Context, foo *v1alpha1.Foo) error {
	_, err := r.Kube.AppsV1().Deployments(foo.Namespace).Create(ctx, NewDeployment(foo), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Our cache has not seen it yet: our own earlier create (its event
		// will queue this Foo again) or someone else's, whose event will
		// not (it has no owner to map to), so retry until the cache has it.
		return fmt.Errorf("deployment %s/%s exists but is not cached yet: %w", foo.Namespace, foo.Spec.DeploymentName, err)
	}
	if apierrors.IsInvalid(err) { // the server will refuse it again until the Foo changes
		return r.invalid(ctx, foo, fmt.Sprintf("the Deployment of Foo %q is invalid: %v", foo.Name, err))
	}
	if err != nil {
		return fmt.Errorf("create deployment %s/%s: %w", foo.Namespace, foo.Spec.DeploymentName, err)
	}
	r.Recorder.Eventf(foo, corev1.EventTypeNormal, ReasonCreated, "Created Deployment %q", foo.Spec.DeploymentName)
	return nil
}

// invalid reports a Foo the controller cannot act on: msg in its status
// and in a Warning event, and a terminal error, so the key is not retried
// (a change to the Foo queues it again). A failure to write the status is
// returned as is, to be retried.
func (r *Reconciler) invalid(ctx context.Context, foo *v1alpha1.Foo, msg string) error {
	if foo.Status.Message != msg {
		r.Recorder.Event(foo, corev1.EventTypeWarning, ReasonInvalid, msg)
	}
	if err := r.setStatus(ctx, foo, 0, msg); err != nil {
		return err
	}
	return controller.Terminal(errors.New(msg))
}

// setStatus writes the Foo's status if it changed.
func (r *Reconciler) setStatus(ctx context.Context, foo *v1alpha1.Foo, available int32, message string) error {
	if foo.Status.AvailableReplicas == available && foo.Status.Message == message {
		return nil
	}
	updated := foo.DeepCopy() // cached objects are read-only
	updated.Status.AvailableReplicas, updated.Status.Message = available, message
	if _, err := r.FooClient.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of foo %s/%s: %w", foo.Namespace, foo.Name, err)
	}
	if message == "" {
		r.Recorder.Event(foo, corev1.EventTypeNormal, ReasonSynced, messageSynced)
	}
	return nil
}

func replicas(foo *v1alpha1.Foo) int32 {
	if foo.Spec.Replicas == nil {
		return 1
	}
	return *foo.Spec.Replicas
}

// NewDeployment returns the Deployment foo asks for, controlled by foo.
func NewDeployment(foo *v1alpha1.Foo) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "foo": foo.Name}
	n := replicas(foo)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            foo.Spec.DeploymentName,
			Namespace:       foo.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(foo, v1alpha1.SchemeGroupVersion.WithKind(fooKind))},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
			},
		},
	}
}
