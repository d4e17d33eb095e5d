package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ctrlkit/ctrlkit/object"
)

// Patcher is the part of a typed client a Finalizer needs; the client of
// manager.Client is one.
type Patcher[T any] interface {
	Patch(ctx context.Context, name object.ObjectName, pt types.PatchType, data []byte, opts metav1.PatchOptions) (T, error)
}

// Finalizer keeps an object from disappearing before its cleanup ran: the
// way to release what the garbage collector cannot (objects in another
// namespace or cluster-scoped, anything outside Kubernetes).
//
// Call Finalize first in every reconcile of the object. While the object
// lives, it adds the finalizer if missing, so the finalizer is on the
// server before the reconcile makes its first side effect. Once the object
// is being deleted, it runs Cleanup and removes the finalizer only after
// Cleanup succeeded, so the API server keeps the object (with its
// deletionTimestamp set) until then. A Cleanup that fails returns its
// error: the controller retries the key with backoff and the finalizer
// stays. Cleanup must be idempotent: it may run again after a crash
// between its end and the finalizer's removal.
//
// Finalize stops the reconcile after it adds the finalizer and counts on the
// patch's watch event to reconcile the object again: finalize the object
// the controller reconciles (its For source), not one whose changes do not
// queue the reconcile.
//
// The finalizer is added and removed with a JSON merge patch that touches
// only metadata.finalizers and carries the resource version the reconcile
// saw, so it never removes another controller's finalizer and never acts on
// a stale read: a concurrent write fails it with a conflict
// (apierrors.IsConflict), and the reconcile retries on the newer object.
type Finalizer[T Object] struct {
	name    string
	client  Patcher[T]
	cleanup func(context.Context, T) error
	err     error // why the finalizer cannot work, from NewFinalizer
}

// Object is what the API types of client-go and controller-gen are: the
// one interface of that name (object.APIObject).
type Object = object.APIObject

// NewFinalizer returns the finalizer called name (domain-qualified, e.g.
// "example.com/cleanup", as the API server expects), written through c,
// whose cleanup runs when an object is being deleted. On error, the
// Finalizer it returns is not nil: its Finalize returns that error, so a
// caller may report the error once (as manager.Finalizer does) and still
// hand the Finalizer to a reconciler.
func NewFinalizer[T Object](name string, c Patcher[T], cleanup func(ctx context.Context, obj T) error) (*Finalizer[T], error) {
	f := &Finalizer[T]{name: name, client: c, cleanup: cleanup}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 || !strings.Contains(name, "/") {
		f.err = fmt.Errorf("apply: finalizer name %q is not a domain-qualified name (%s): "+
			"use \"<your domain>/<name>\", e.g. \"example.com/cleanup\"", name, strings.Join(errs, "; "))
	} else if c == nil || cleanup == nil {
		f.err = fmt.Errorf("apply: finalizer %q needs a client and a cleanup function", name)
	}
	return f, f.err
}

// Name returns the finalizer's name.
func (f *Finalizer[T]) Name() string { return f.name }

// Finalize does the finalizer's part of a reconcile of obj (read-only, as
// from a cache). When it returns stop true, the reconcile must end there
// and return err: obj is being deleted (err is nil once the cleanup ran and
// the finalizer is off), or the finalizer was just added, which left obj
// behind the server (a write made from it, such as an UpdateStatus, would
// fail with a conflict): the write's watch event brings the object back,
// current, for the next reconcile, as kube-rs's finalizer helper does.
// stop false with a nil err means obj lives and the finalizer is on the
// server: go on with the reconcile.
func (f *Finalizer[T]) Finalize(ctx context.Context, obj T) (stop bool, err error) {
	if f.err != nil {
		return true, f.err
	}
	has := slices.Contains(obj.GetFinalizers(), f.name)
	if obj.GetDeletionTimestamp() == nil {
		if has {
			return false, nil
		}
		return true, f.write(ctx, obj, append(slices.Clone(obj.GetFinalizers()), f.name), "add")
	}
	if !has {
		return true, nil // cleaned up already (or never needed): the object goes once the other finalizers are off
	}
	if err := f.cleanup(ctx, obj); err != nil {
		return true, fmt.Errorf("finalizer %s of %s: cleanup: %w", f.name, object.NameOf(obj), err)
	}
	rest := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(s string) bool { return s == f.name })
	return true, f.write(ctx, obj, rest, "remove")
}

// write sets obj's finalizers to list, if obj is still at the resource
// version it was read at.
func (f *Finalizer[T]) write(ctx context.Context, obj T, list []string, what string) error {
	if list == nil {
		list = []string{} // null would mean "leave as is" in a merge patch
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": list, "resourceVersion": obj.GetResourceVersion()}})
	if err != nil {
		return err
	}
	name := object.NameOf(obj)
	if _, err := f.client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("finalizer %s: %s on %s: %w", f.name, what, name, err)
	}
	return nil
}
