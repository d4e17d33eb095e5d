package client

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/gentype"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
)

// Object is what a Client reads and writes: a pointer to an API type with
// object metadata (*corev1.ConfigMap, a custom resource's Go type),
// registered in the client's scheme. It is object.APIObject, as
// manager.Object and apply.Object are.
type Object = object.APIObject

// ErrNoStatusSubresource reports a status write (UpdateStatus, PatchStatus,
// ApplyStatus) on a resource the server serves without a status
// subresource. It deliberately does not wrap the server's 404, so that a
// reconciler ignoring NotFound (the object is gone) does not ignore it.
var ErrNoStatusSubresource = errors.New("client: no status subresource")

// Client reads and writes the objects of one type T through the API
// server. Build it with New (or manager.Client). Its zero value is not
// usable. It is safe for concurrent use; the objects it returns are new
// and belong to the caller.
type Client[T Object] struct {
	d       listwatch.Discovery
	gvk     schema.GroupVersionKind
	list    schema.GroupVersionKind // the list kind, gvk.Kind+"List"
	scheme  *runtime.Scheme
	builtIn bool  // a Kubernetes type: protobuf on the wire
	err     error // set by New when T cannot be used: every call returns it

	// mu guards res, set once by the first call that finds the resource
	// on the server. Discovery requests are made outside mu.
	mu  sync.Mutex
	res *resource
}

// resource is how T is reached on the server.
type resource struct {
	rc         rest.Interface
	name       string // the plural resource, e.g. "configmaps"
	namespaced bool
}

// New returns a client of T over d (the same ingredients a manager's
// informers use: its rest.Config, HTTP client, RESTMapper and scheme
// serializer); scheme must be the one d.Serializer was made from. New
// makes no request: T's resource and scope are looked up at the first
// call, and again at every call while the server does not serve them.
//
// If T is not in scheme, New still returns a client, whose every call
// fails with an error saying how to register it; manager.Client reports
// the same error from Run.
func New[T Object](d listwatch.Discovery, scheme *runtime.Scheme) *Client[T] {
	c := &Client[T]{d: d, scheme: scheme}
	c.gvk, c.err = kindOf[T](scheme)
	if c.err == nil {
		c.list = c.gvk.GroupVersion().WithKind(c.gvk.Kind + "List")
		c.builtIn = clientgoscheme.Scheme.Recognizes(c.gvk)
	}
	return c
}

// NewForConfig returns a client of T for the API server of cfg, with the
// types of scheme (nil: Kubernetes' own types only), for programs that
// have no manager: a command-line tool, a test, a job. It makes no
// request; it fails only when cfg cannot be used. Each call opens
// connections of its own: make one client per type and keep it (a
// manager's, manager.Client, shares the manager's instead).
func NewForConfig[T Object](cfg *rest.Config, scheme *runtime.Scheme) (*Client[T], error) {
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	d, err := listwatch.NewDiscovery(cfg, hc, scheme)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return New[T](d, scheme), nil
}

// kindOf returns T's group, version and kind from scheme.
func kindOf[T Object](scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return schema.GroupVersionKind{}, fmt.Errorf("client: %v is not a pointer to an API type struct", t)
	}
	if scheme == nil {
		return schema.GroupVersionKind{}, errors.New("client: nil scheme")
	}
	gvks, _, err := scheme.ObjectKinds(newObject[T]())
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf("client: %v is not in the scheme; register its AddToScheme "+
			"in manager.Options.AddToScheme (or the scheme given to client.New): %w", t, err)
	}
	return gvks[0], nil
}

// newObject returns a new T (a pointer to a zero struct).
func newObject[T Object]() T {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}

// GroupVersionKind returns T's kind as the scheme names it, or the error
// every call returns when T is not in the scheme.
func (c *Client[T]) GroupVersionKind() (schema.GroupVersionKind, error) { return c.gvk, c.err }

// resource returns how T is reached, asking discovery when it is not
// known yet.
func (c *Client[T]) resource() (*resource, error) {
	if c.err != nil {
		return nil, c.err
	}
	c.mu.Lock()
	r := c.res
	c.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := c.discover()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res == nil { // the first of concurrent first calls wins
		c.res = r
	}
	return c.res, nil
}

// discover looks T up on the server (resetting the mapper's cached
// discovery once if it does not know T: its CRD may be new) and builds
// the REST client of T's group and version.
func (c *Client[T]) discover() (*resource, error) {
	mp, err := c.d.Mapper.RESTMapping(c.gvk.GroupKind(), c.gvk.Version)
	if meta.IsNoMatchError(err) {
		c.d.Mapper.Reset()
		mp, err = c.d.Mapper.RESTMapping(c.gvk.GroupKind(), c.gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("client: no resource for kind %s in %s on the server: is its CustomResourceDefinition installed? (%w)",
			c.gvk.Kind, c.gvk.GroupVersion(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("client: resource of kind %s in %s: %w", c.gvk.Kind, c.gvk.GroupVersion(), err)
	}
	rc, err := c.d.RESTClient(c.gvk.GroupVersion(), nil)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", c.gvk.Kind, err)
	}
	return &resource{rc: rc, name: mp.Resource.Resource, namespaced: mp.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

// typedClient is client-go's generic client of T, for one namespace.
type typedClient[T Object] = gentype.ClientWithListAndApply[T, runtime.Object, named]

// typed returns client-go's generic client of T in namespace ns ("" for
// a cluster-scoped resource, or every namespace in a List), after
// checking that ns fits T's scope. what names the call for errors.

func (c *Client[T]) typed(what string, name object.ObjectName, forList bool) (*typedClient[T], error) {
	r, err := c.resource()
	if err != nil {
		return nil, err
	}
	ns := name.Namespace
	switch {
	case r.namespaced && ns == "" && !forList:
		return nil, fmt.Errorf("client: %s %s %q: the name has no namespace, and %s are namespaced", what, c.gvk.Kind, name.Name, r.name)
	case !r.namespaced && ns != "":
		return nil, fmt.Errorf("client: %s %s %s: a namespace is given, but %s are cluster-scoped", what, c.gvk.Kind, name, r.name)
	}
	var opts []gentype.Option[T]
	if c.builtIn {
		opts = append(opts, gentype.PrefersProtobuf[T]())
	}
	return gentype.NewClientWithListAndApply[T, runtime.Object, named](r.name, r.rc, metav1.ParameterCodec, ns,
		newObject[T], c.newList, opts...), nil
}

// newList returns a new list of T (nil when the scheme has none; List
// checks that first).
func (c *Client[T]) newList() runtime.Object {
	l, _ := c.scheme.New(c.list)
	return l
}

// named is an apply configuration that names its object, as client-go's
// generated ones and ApplyObject's do.
type named interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// checkName fails on an empty name.
func (c *Client[T]) checkName(what string, name object.ObjectName) error {
	if name.Name == "" {
		return fmt.Errorf("client: %s %s: empty name (namespace %q)", what, c.gvk.Kind, name.Namespace)
	}
	return nil
}
