// Command website is the operator of docs/custom-resource.md. Every Website
// gets a Deployment serving its image and a Service in front of it, both
// owned by the Website (deleted with it); an entry in the site directory, a
// ConfigMap in another namespace that a finalizer removes when the Website
// goes; and a Ready condition in its status.
package main

import (
	"context"
	"embed"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"

	webv1 "example.com/website/api/v1"
)

//go:generate go tool controller-gen object crd rbac:roleName=website paths=./... output:crd:dir=config/crd output:rbac:dir=config/rbac

// CRDs are the CustomResourceDefinitions controller-gen generates from the
// types (go generate), for tests to install.
//
//go:embed config/crd
var CRDs embed.FS

// +kubebuilder:rbac:groups=example.com,resources=websites,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=example.com,resources=websites/status,verbs=update
// +kubebuilder:rbac:groups=example.com,resources=websites/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler makes a Website's children and status match its spec.
type Reconciler struct {
	Websites    store.Reader[*webv1.Website]
	Deployments store.Reader[*appsv1.Deployment]
	Services    store.Reader[*corev1.Service]
	Entries     store.Reader[*corev1.ConfigMap] // the site directory's
	Client      *client.Client[*webv1.Website]
	Kube        kubernetes.Interface
	Finalizer   *apply.Finalizer[*webv1.Website]
	Events      record.EventRecorder
	Directory   string // the namespace of the site directory
}

// Setup adds the Website controller to m, with the site directory in the
// namespace directory.
func Setup(m *manager.Manager, directory string) error {
	websites := manager.Informer[*webv1.Website](m, manager.Scope{})
	deployments := manager.Informer[*appsv1.Deployment](m, manager.Scope{})
	services := manager.Informer[*corev1.Service](m, manager.Scope{})
	entries := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: directory}) // read by apply.Apply, queues nothing
	r := &Reconciler{Websites: websites.Reader(), Deployments: deployments.Reader(), Services: services.Reader(),
		Entries: entries.Reader(), Client: manager.Client[*webv1.Website](m), Kube: m.Kube(), Events: m.EventRecorder("website"),
		Directory: directory}
	r.Finalizer = manager.Finalizer(m, "example.com/directory", r.removeEntry)
	// ReadYourWrites: a reconcile that the Deployment's apply queues waits until the cache shows the status the
	// reconcile before it wrote, so it does not rewrite that status from an older Website (a conflict, a retry)
	c, err := manager.NewController(m, "website", r, manager.ControllerOptions{ReadYourWrites: true},
		manager.For(websites), manager.Owns(deployments), manager.Owns(services))
	if err != nil {
		return err
	}
	c.WaitForSynced("site directory", entries.Synced(), entries.LastError) // reconciles start once it is listed
	return nil
}

// Reconcile implements controller.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	site, ok := r.Websites.Get(name)
	if !ok {
		return controller.Result{}, nil // deleted: what it owns is deleted with it
	}
	if stop, err := r.Finalizer.Finalize(ctx, site); stop || err != nil {
		return controller.Result{}, err
	}
	owner := apply.ControllerReference(site, webv1.GroupVersion.WithKind("Website"))
	labels := map[string]string{"website": site.Name}
	pod := corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().
		WithName("web").WithImage(site.Spec.Image).WithPorts(corev1ac.ContainerPort().WithContainerPort(80))))
	deployment := appsv1ac.Deployment(site.Name, site.Namespace).WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(replicas(site)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).WithTemplate(pod))
	// apply.Apply sends nothing when the cached child already holds what it would apply
	if _, _, err := apply.Apply(ctx, r.Kube.AppsV1().Deployments(site.Namespace), r.Deployments, deployment, applyOptions); err != nil {
		return controller.Result{}, err
	}
	service := corev1ac.Service(site.Name, site.Namespace).WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().WithSelector(labels).WithPorts(corev1ac.ServicePort().WithPort(80)))
	if _, _, err := apply.Apply(ctx, r.Kube.CoreV1().Services(site.Namespace), r.Services, service, applyOptions); err != nil {
		return controller.Result{}, err
	}
	entry := corev1ac.ConfigMap(entryName(site), r.Directory).
		WithData(map[string]string{"host": site.Spec.Host, "service": site.Name + "." + site.Namespace})
	if _, _, err := apply.Apply(ctx, r.Kube.CoreV1().ConfigMaps(r.Directory), r.Entries, entry, applyOptions); err != nil {
		return controller.Result{}, err
	}
	return controller.Result{}, r.updateStatus(ctx, site)
}

// applyOptions name the operator's writes; main keeps this field manager's
// entries of managedFields in the caches, which apply.Apply reads.
var applyOptions = metav1.ApplyOptions{FieldManager: "website", Force: true}

// updateStatus writes what the Deployment reports into the status, with
// the Ready condition, if that changed anything.
func (r *Reconciler) updateStatus(ctx context.Context, site *webv1.Website) error {
	updated := site.DeepCopy() // the cached object is read-only
	updated.Status.ObservedGeneration = site.Generation
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing",
		Message: "waiting for the Deployment's replicas", ObservedGeneration: site.Generation}
	if d, ok := r.Deployments.Get(object.NameOf(site)); ok {
		updated.Status.AvailableReplicas = d.Status.AvailableReplicas
		if d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas >= replicas(site) {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "Available", "every replica is available"
		}
	}
	becameReady := meta.SetStatusCondition(&updated.Status.Conditions, ready) && ready.Status == metav1.ConditionTrue
	if equality.Semantic.DeepEqual(updated.Status, site.Status) {
		return nil
	}
	if _, err := r.Client.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if becameReady {
		r.Events.Event(site, corev1.EventTypeNormal, "Ready", ready.Message)
	}
	return nil
}

// removeEntry is the finalizer's cleanup: the site leaves the directory.
func (r *Reconciler) removeEntry(ctx context.Context, site *webv1.Website) error {
	return client.IgnoreNotFound(r.Kube.CoreV1().ConfigMaps(r.Directory).Delete(ctx, entryName(site), metav1.DeleteOptions{}))
}

func entryName(site *webv1.Website) string { return site.Namespace + "." + site.Name }

func replicas(site *webv1.Website) int32 { return ptr.Deref(site.Spec.Replicas, 1) }
