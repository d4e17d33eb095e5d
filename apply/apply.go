// Package apply holds the writes every controller makes and would otherwise
// copy: owner references that tie a child to its parent (so the garbage
// collector deletes it with the parent, and handler.EnqueueOwner finds the
// parent again), and create-or-update over a typed client. For server-side
// apply, use client-go's apply configurations with ControllerReference.
//
// Concurrency: the functions are safe for concurrent use; they modify only
// the objects passed to them.
package apply

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// ErrOwnedByAnother reports an object already controlled by another owner.
var ErrOwnedByAnother = errors.New("apply: object has another controller")

// ControllerReference returns the owner reference that makes owner, of kind
// gvk, the controller of a child: controller and blockOwnerDeletion true. Use
// it with an apply configuration's WithOwnerReferences.
func ControllerReference(owner metav1.Object, gvk schema.GroupVersionKind) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().WithAPIVersion(gvk.GroupVersion().String()).WithKind(gvk.Kind).
		WithName(owner.GetName()).WithUID(owner.GetUID()).WithController(true).WithBlockOwnerDeletion(true)
}

// SetControllerReference makes owner the controller of obj, replacing an
// earlier reference to the same owner; owner's group, version and kind come
// from scheme (the manager's: m.Scheme()). It fails with ErrOwnedByAnother
// if another object controls obj, when owner's type is not in scheme, and
// when owner is namespaced in another namespace than obj (the garbage
// collector would delete obj at once).
func SetControllerReference(owner Object, obj metav1.Object, scheme *runtime.Scheme) error {
	gvks, _, err := scheme.ObjectKinds(owner)
	if err != nil || len(gvks) == 0 {
		return fmt.Errorf("apply: owner %T is not in the scheme; register its AddToScheme: %w", owner, err)
	}
	gvk := gvks[0]
	if owner.GetNamespace() != "" && owner.GetNamespace() != obj.GetNamespace() {
		return fmt.Errorf("apply: owner %s/%s is in another namespace than %s/%s",
			owner.GetNamespace(), owner.GetName(), obj.GetNamespace(), obj.GetName())
	}
	yes := true
	ref := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(),
		UID: owner.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}
	refs := obj.GetOwnerReferences()
	if c := metav1.GetControllerOfNoCopy(obj); c != nil && c.UID != owner.GetUID() {
		return fmt.Errorf("%w: %s %s controls %s", ErrOwnedByAnother, c.Kind, c.Name, obj.GetName())
	}
	out := make([]metav1.OwnerReference, 0, len(refs)+1)
	for _, r := range refs {
		if r.UID != owner.GetUID() {
			out = append(out, r)
		}
	}
	obj.SetOwnerReferences(append(out, ref))
	return nil
}

// Client is the part of a typed client-go resource client that
// CreateOrUpdate needs; kube.AppsV1().Deployments(ns) is one.
type Client[T runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Result says what CreateOrUpdate did.
type Result string

// CreateOrUpdate's results.
const (
	Unchanged Result = "unchanged"
	Created   Result = "created"
	Updated   Result = "updated"
)

// CreateOrUpdate makes the object called name exist in the state mutate
// gives it. It reads the object from the server (not a cache: the write
// must not be based on a stale read), creates it from newObj after mutate if
// it is missing, else applies mutate to the server's copy and updates it
// only if something changed. mutate must set the desired state
// idempotently, not rebuild the object (keep fields others set). It returns
// the object the server holds now and what was done; a conflict (someone
// wrote in between) is returned as is: retry the reconcile.
func CreateOrUpdate[T interface {
	metav1.Object
	runtime.Object
}](ctx context.Context, c Client[T], name string, newObj func() T, mutate func(T) error) (T, Result, error) {
	cur, err := c.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := newObj()
		if err := mutate(obj); err != nil {
			return obj, Unchanged, err
		}
		obj, err = c.Create(ctx, obj, metav1.CreateOptions{})
		return obj, Created, err
	}
	if err != nil {
		return cur, Unchanged, err
	}
	before := cur.DeepCopyObject()
	if err := mutate(cur); err != nil {
		return cur, Unchanged, err
	}
	if equality.Semantic.DeepEqual(before, runtime.Object(cur)) {
		return cur, Unchanged, nil
	}
	cur, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return cur, Updated, err
}
