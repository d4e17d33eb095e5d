package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// Apply writes cfg with server-side apply and returns the server's copy:
// the fields cfg sets become owned by opts.FieldManager (required: the
// writer's name, e.g. the controller's), fields this manager set before
// and cfg no longer sets are removed, and fields other managers own are
// left alone. A field another manager owns with a different value is a
// conflict (apierrors.IsConflict) unless opts.Force is set, which takes it
// over. The object is created if it does not exist.
//
// cfg names the object: it is one of client-go's apply configurations
// (k8s.io/client-go/applyconfigurations, e.g. corev1ac.ConfigMap(name,
// namespace)), one generated for a custom type by applyconfiguration-gen,
// or ApplyObject(obj) for any other type.
func (c *Client[T]) Apply(ctx context.Context, cfg runtime.ApplyConfiguration, opts metav1.ApplyOptions) (T, error) {
	return c.apply(ctx, "apply", (*typedClient[T]).Apply, cfg, opts)
}

// ApplyStatus is Apply on the status subresource: only the status in cfg
// is applied (give the object's name and, for a custom type, nothing
// but the status fields this writer owns). A resource served without a
// status subresource makes it fail with ErrNoStatusSubresource.
func (c *Client[T]) ApplyStatus(ctx context.Context, cfg runtime.ApplyConfiguration, opts metav1.ApplyOptions) (T, error) {
	return c.apply(ctx, "apply status of", (*typedClient[T]).ApplyStatus, cfg, opts)
}

// apply makes the write of verb, the typed client's Apply or ApplyStatus.
func (c *Client[T]) apply(ctx context.Context, what string, verb func(*typedClient[T], context.Context, named, metav1.ApplyOptions) (T, error),
	cfg runtime.ApplyConfiguration, opts metav1.ApplyOptions) (T, error) {
	var zero T
	if c.err != nil {
		return zero, c.err
	}
	n, name, err := c.applyTarget(what, cfg, opts)
	if err != nil {
		return zero, err
	}
	return c.write(ctx, what, name, what != "apply", func(g *typedClient[T]) (T, error) { return verb(g, ctx, n, opts) })
}

// applyTarget checks cfg and opts and returns cfg (ApplyObject's with T's
// kind filled in) with the name of its object.
func (c *Client[T]) applyTarget(what string, cfg runtime.ApplyConfiguration, opts metav1.ApplyOptions) (named, object.ObjectName, error) {
	var name object.ObjectName
	if v := reflect.ValueOf(cfg); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil, name, fmt.Errorf("client: %s %s: nil apply configuration", what, c.gvk.Kind)
	}
	if a, ok := cfg.(applyObject); ok {
		if v := reflect.ValueOf(a.obj); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
			return nil, name, fmt.Errorf("client: %s %s: ApplyObject of a nil object", what, c.gvk.Kind)
		}
		a.gvk = c.gvk
		cfg = a
	}
	n, ok := cfg.(named)
	if !ok {
		return nil, name, fmt.Errorf("client: %s %s: %T does not name its object (it has no GetName() *string); "+
			"wrap the object with client.ApplyObject", what, c.gvk.Kind, cfg)
	}
	if p := n.GetName(); p != nil {
		name.Name = *p
	}
	if x, ok := cfg.(interface{ GetNamespace() *string }); ok && x.GetNamespace() != nil {
		name.Namespace = *x.GetNamespace()
	}
	if x, ok := cfg.(interface{ GetKind() *string }); ok && x.GetKind() != nil && *x.GetKind() != c.gvk.Kind {
		return nil, name, fmt.Errorf("client: %s %s: the apply configuration is of kind %s", what, c.gvk.Kind, *x.GetKind())
	}
	if err := c.checkName(what, name); err != nil {
		return nil, name, err
	}
	if opts.FieldManager == "" {
		return nil, name, fmt.Errorf("client: %s %s %s: ApplyOptions.FieldManager is required (the writer's name, e.g. the controller's)",
			what, c.gvk.Kind, name)
	}
	return n, name, nil
}

// ApplyObject is the apply configuration of obj, for a type that has no
// generated one: a *unstructured.Unstructured holding only the fields the
// writer owns, or a typed object. obj names the object (name and
// namespace); its apiVersion and kind may be left empty, the client fills
// them in. The object is sent as JSON as it is: a typed object sends every
// field its JSON tags do not omit (a zero replicas, an empty string), and
// the writer then owns those too, so prefer Unstructured unless every
// optional field of the type is a pointer or has omitempty. With
// ApplyStatus a typed object is fine: the server applies only its status.
func ApplyObject(obj metav1.Object) runtime.ApplyConfiguration { return applyObject{obj: obj} }

// applyObject is ApplyObject's configuration; gvk is set by the client
// that applies it.
type applyObject struct {
	obj metav1.Object
	gvk schema.GroupVersionKind
}

func (applyObject) IsApplyConfiguration() {}

func (a applyObject) GetName() *string {
	n := a.obj.GetName()
	return &n
}

func (a applyObject) GetNamespace() *string {
	ns := a.obj.GetNamespace()
	return &ns
}

// MarshalJSON encodes the object with apiVersion and kind filled in where
// they are empty.
func (a applyObject) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(a.obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, errors.New("client: ApplyObject: the object does not encode as a JSON object")
	}
	for k, v := range map[string]string{"apiVersion": a.gvk.GroupVersion().String(), "kind": a.gvk.Kind} {
		if s := string(fields[k]); s == "" || s == `""` || s == "null" {
			fields[k], _ = json.Marshal(v)
		}
	}
	return json.Marshal(fields)
}
