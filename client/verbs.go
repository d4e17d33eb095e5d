package client

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/object"
)

// Every verb blocks for one request (List: one per page), is safe for
// concurrent use, and returns a new object owned by the caller. Errors
// wrap the server's with %w: classify them with apierrors.IsNotFound,
// IsConflict, IsAlreadyExists, ...

// Get reads the object called name from the server (not from a cache).
func (c *Client[T]) Get(ctx context.Context, name object.ObjectName) (T, error) {
	var zero T
	if err := c.checkName("get", name); err != nil {
		return zero, err
	}
	g, err := c.typed("get", name, false)
	if err != nil {
		return zero, err
	}
	obj, err := g.Get(ctx, name.Name, metav1.GetOptions{})
	return c.result("get", name, obj, err)
}

// List returns every object in namespace ("" for every namespace, and for
// a cluster-scoped type) that opts selects. With opts.Limit set it reads
// the list in pages of that size, following the continue tokens, and still
// returns every object; the list's own metadata (resource version,
// continue token) is not returned: to watch from it, use an informer.
// The scheme must know T's list type (T's kind with "List" appended).
func (c *Client[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) ([]T, error) {
	if c.err == nil && !c.scheme.Recognizes(c.list) {
		return nil, fmt.Errorf("client: list %s: the scheme has no %s; register it beside %s in AddToScheme", c.gvk.Kind, c.list.Kind, c.gvk.Kind)
	}
	g, err := c.typed("list", object.ObjectName{Namespace: namespace}, true)
	if err != nil {
		return nil, err
	}
	var all []T
	for {
		list, err := g.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("client: list %s in %q: %w", c.gvk.Kind, namespace, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, fmt.Errorf("client: list %s: %w", c.gvk.Kind, err)
		}
		for _, it := range items {
			obj, ok := it.(T)
			if !ok {
				return nil, fmt.Errorf("client: list %s: item of type %T", c.gvk.Kind, it)
			}
			all = append(all, obj)
		}
		lm, err := meta.ListAccessor(list)
		if err != nil || lm.GetContinue() == "" {
			return all, nil
		}
		opts.Continue = lm.GetContinue()
		opts.ResourceVersion, opts.ResourceVersionMatch = "", "" // a continued list reads the first page's snapshot
	}
}

// Create creates obj in obj's namespace and returns the server's copy.
func (c *Client[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	var zero T
	name, err := c.nameOf("create", obj)
	if err != nil {
		return zero, err
	}
	g, err := c.typed("create", name, false)
	if err != nil {
		return zero, err
	}
	got, err := g.Create(ctx, obj, opts)
	return c.result("create", name, got, err)
}

// Update replaces obj on the server. With obj's resource version set (as
// on an object read back), a concurrent change makes it fail with a
// conflict (apierrors.IsConflict): read again and retry. On a type with a
// status subresource, the status in obj is ignored; see UpdateStatus.
func (c *Client[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.update(ctx, "update", (*typedClient[T]).Update, obj, opts)
}

// UpdateStatus replaces the status of obj on the server (the status
// subresource), ignoring the rest of obj; conflicts as in Update. A
// resource served without a status subresource makes it fail with
// ErrNoStatusSubresource.
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.update(ctx, "update status of", (*typedClient[T]).UpdateStatus, obj, opts)
}

// update makes the write of verb, the typed client's Update or UpdateStatus.
func (c *Client[T]) update(ctx context.Context, what string, verb func(*typedClient[T], context.Context, T, metav1.UpdateOptions) (T, error),
	obj T, opts metav1.UpdateOptions) (T, error) {
	var zero T
	name, err := c.nameOf(what, obj)
	if err == nil {
		err = c.checkName(what, name)
	}
	if err != nil {
		return zero, err
	}
	return c.write(ctx, what, name, what != "update", func(g *typedClient[T]) (T, error) { return verb(g, ctx, obj, opts) })
}

// Patch changes the object called name with data, a patch of type pt
// (types.MergePatchType, types.JSONPatchType; types.StrategicMergePatchType
// for built-in types only; for server-side apply prefer Apply).
func (c *Client[T]) Patch(ctx context.Context, name object.ObjectName, pt types.PatchType, data []byte, opts metav1.PatchOptions) (T, error) {
	return c.patch(ctx, "patch", name, pt, data, opts)
}

// PatchStatus is Patch on the status subresource; see UpdateStatus.
func (c *Client[T]) PatchStatus(ctx context.Context, name object.ObjectName, pt types.PatchType, data []byte, opts metav1.PatchOptions) (T, error) {
	return c.patch(ctx, "patch status of", name, pt, data, opts, "status")
}

func (c *Client[T]) patch(ctx context.Context, what string, name object.ObjectName, pt types.PatchType, data []byte,
	opts metav1.PatchOptions, sub ...string) (T, error) {
	if err := c.checkName(what, name); err != nil {
		var zero T
		return zero, err
	}
	return c.write(ctx, what, name, len(sub) > 0, func(g *typedClient[T]) (T, error) {
		return g.Patch(ctx, name.Name, pt, data, opts, sub...)
	})
}

// write makes one write of the object called name with do; a status write
// (status true) that the server answers 404 is told apart from a missing
// object (statusError).
func (c *Client[T]) write(ctx context.Context, what string, name object.ObjectName, status bool,
	do func(*typedClient[T]) (T, error)) (T, error) {
	g, err := c.typed(what, name, false)
	if err != nil {
		var zero T
		return zero, err
	}
	got, err := do(g)
	if status {
		err = c.statusError(ctx, g.Get, name, err)
	}
	return c.result(what, name, got, err)
}

// Delete deletes the object called name. A missing object is an error
// (apierrors.IsNotFound), as on the server.
func (c *Client[T]) Delete(ctx context.Context, name object.ObjectName, opts metav1.DeleteOptions) error {
	if err := c.checkName("delete", name); err != nil {
		return err
	}
	g, err := c.typed("delete", name, false)
	if err != nil {
		return err
	}
	if err := g.Delete(ctx, name.Name, opts); err != nil {
		return fmt.Errorf("client: delete %s %s: %w", c.gvk.Kind, name, err)
	}
	return nil
}

// result wraps a call's error with what it did, and returns the zero T
// with it.
func (c *Client[T]) result(what string, name object.ObjectName, obj T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, fmt.Errorf("client: %s %s %s: %w", what, c.gvk.Kind, name, err)
	}
	return obj, nil
}

// statusError turns the 404 of a status write on an object that exists
// into ErrNoStatusSubresource (one more request, on that path only).
func (c *Client[T]) statusError(ctx context.Context, get func(context.Context, string, metav1.GetOptions) (T, error),
	name object.ObjectName, err error) error {
	if !apierrors.IsNotFound(err) {
		return err
	}
	if _, gerr := get(ctx, name.Name, metav1.GetOptions{}); gerr != nil {
		return err // the object is missing: the 404 says so
	}
	fix := "its CustomResourceDefinition needs `subresources: status` (the marker +kubebuilder:subresource:status on the type)"
	if c.builtIn {
		fix = "write the whole object with Update, Patch or Apply instead"
	}
	return noStatusError{fmt.Sprintf("the server serves no status subresource for %s: %s", c.gvk.Kind, fix)}
}

// noStatusError is ErrNoStatusSubresource with the fix.
type noStatusError struct{ msg string }

func (e noStatusError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrNoStatusSubresource) hold.
func (e noStatusError) Is(target error) bool { return target == ErrNoStatusSubresource }

// nameOf reads obj's name, failing on a nil obj.
func (c *Client[T]) nameOf(what string, obj T) (object.ObjectName, error) {
	if v := reflect.ValueOf(obj); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return object.ObjectName{}, fmt.Errorf("client: %s %s: nil object", what, c.gvk.Kind)
	}
	return object.ObjectName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, nil
}

// IgnoreNotFound returns nil for an error saying the object does not
// exist (apierrors.IsNotFound), and err otherwise: for deletes and reads
// where a missing object is the goal or fine.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
