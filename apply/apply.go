// Package apply holds the writes every controller makes and would otherwise
// copy: owner references that tie a child to its parent (so the garbage
// collector deletes it with the parent, and handler.EnqueueOwner finds the
// parent again), create-or-update over a typed client (reading a cache
// where it can), server-side apply that sends nothing when the cached
// object already holds the desired state (Apply, with client-go's apply
// configurations and ControllerReference), and finalizers that hold an
// object until its cleanup ran.
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

	"github.com/ctrlkit/ctrlkit/object"
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

// Client is what CreateOrUpdate writes through: ctrlkit's typed client
// (client.Client[T], the manager's manager.Client[T]) is one; a client-go
// typed client of one namespace becomes one with Clientset.
type Client[T runtime.Object] interface {
	Get(ctx context.Context, name object.ObjectName) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// NamespacedClient is a client-go typed client of one namespace's objects
// (kube.AppsV1().Deployments(ns)), as far as CreateOrUpdate uses it.
type NamespacedClient[T runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Clientset makes c, a client-go typed client of one namespace, a Client.
// Its Get ignores the name's namespace: c's is the one it reads.
func Clientset[T runtime.Object](c NamespacedClient[T]) Client[T] { return clientset[T]{c} }

type clientset[T runtime.Object] struct{ NamespacedClient[T] }

func (c clientset[T]) Get(ctx context.Context, name object.ObjectName) (T, error) {
	return c.NamespacedClient.Get(ctx, name.Name, metav1.GetOptions{})
}

// Result says what CreateOrUpdate or Apply did. Returned with an error, it
// names the request that was tried, which may have written nothing (Apply's
// ErrGone never has): check the error first.
type Result string

// CreateOrUpdate's results.
const (
	Unchanged Result = "unchanged"
	Created   Result = "created"
	Updated   Result = "updated"
	Applied   Result = "applied" // Apply's server-side apply, which creates or updates
)

// Getter reads an object from a cache; an informer's store.Reader is one.
type Getter[T any] interface {
	Get(name object.ObjectName) (T, bool)
}

// CreateOrUpdateOption changes where CreateOrUpdate reads.
type CreateOrUpdateOption[T any] func(*createOrUpdate[T])

type createOrUpdate[T any] struct{ cache Getter[T] }

// FromCache makes CreateOrUpdate read the current object from cache (the
// informer of the objects it writes, e.g. of an Owns source) instead of
// the server: a reconcile that changes nothing sends no request at all. A
// stale cache costs one retry, never a wrong write: an update based on an
// old copy fails with a conflict, a create of an object the cache has not
// seen yet fails with AlreadyExists; either is returned, and the key is
// retried once the cache caught up.
func FromCache[T any](cache Getter[T]) CreateOrUpdateOption[T] {
	return func(o *createOrUpdate[T]) { o.cache = cache }
}

// CreateOrUpdate makes the object called name exist in the state mutate
// gives it, through c (manager.Client[T], or a clientset's typed client
// with Clientset). newObj returns the object to create when it is missing:
// it must carry that name and namespace, and may carry what only a new
// object needs; mutate then sets the desired state on it, and on
// the current object when there is one, and must do so idempotently: set the
// fields the controller owns (and the owner reference, with
// SetControllerReference), not rebuild the object, keeping what others set.
//
// The current object is read from the server (or from a cache, with
// FromCache); it is updated only if mutate changed something. It returns
// the object the server holds now (the cached one when unchanged) and what
// was done; a conflict (someone wrote in between) is returned as is: retry
// the reconcile.
func CreateOrUpdate[T Object](ctx context.Context, c Client[T], name object.ObjectName, newObj func() T, mutate func(T) error,
	opts ...CreateOrUpdateOption[T]) (T, Result, error) {
	var o createOrUpdate[T]
	for _, opt := range opts {
		opt(&o)
	}
	cur, err := get(ctx, o, c, name)
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
	before := cur
	cur = cur.DeepCopyObject().(T) // the cache's copy is read-only; the server's is ours but compared below
	if err := mutate(cur); err != nil {
		return before, Unchanged, err
	}
	if equality.Semantic.DeepEqual(runtime.Object(before), runtime.Object(cur)) {
		return before, Unchanged, nil
	}
	cur, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return cur, Updated, err
}

// get reads the current object from the cache or the server.
func get[T Object](ctx context.Context, o createOrUpdate[T], c Client[T], name object.ObjectName) (T, error) {
	if o.cache == nil {
		return c.Get(ctx, name)
	}
	if cur, ok := o.cache.Get(name); ok {
		return cur, nil
	}
	var zero T
	return zero, apierrors.NewNotFound(schema.GroupResource{}, name.Name)
}
