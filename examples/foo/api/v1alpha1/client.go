package v1alpha1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Client is a typed client for Foos: what a generated clientset would give,
// in forty lines over client-go's REST client.
type Client struct{ rc *rest.RESTClient }

// NewForConfig returns a Client for the API server of cfg.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON // custom resources have no protobuf form
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("foo client: %w", err)
	}
	return &Client{rc: rc}, nil
}

// Foos returns the Foos of one namespace ("" for all, to list and watch).
func (c *Client) Foos(namespace string) *Foos { return &Foos{rc: c.rc, ns: namespace} }

// Foos reads and writes the Foos of one namespace.
type Foos struct {
	rc *rest.RESTClient
	ns string
}

// List lists Foos.
func (f *Foos) List(ctx context.Context, opts metav1.ListOptions) (*FooList, error) {
	out := &FooList{}
	err := f.rc.Get().Namespace(f.ns).Resource(Resource.Resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches Foos.
func (f *Foos) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return f.rc.Get().Namespace(f.ns).Resource(Resource.Resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Get reads one Foo.
func (f *Foos) Get(ctx context.Context, name string) (*Foo, error) {
	out := &Foo{}
	err := f.rc.Get().Namespace(f.ns).Resource(Resource.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// Create creates a Foo.
func (f *Foos) Create(ctx context.Context, foo *Foo) (*Foo, error) {
	out := &Foo{}
	err := f.rc.Post().Namespace(f.ns).Resource(Resource.Resource).Body(foo).Do(ctx).Into(out)
	return out, err
}

// Update replaces a Foo's spec and metadata.
func (f *Foos) Update(ctx context.Context, foo *Foo) (*Foo, error) {
	out := &Foo{}
	err := f.rc.Put().Namespace(f.ns).Resource(Resource.Resource).Name(foo.Name).Body(foo).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus replaces a Foo's status (the status subresource).
func (f *Foos) UpdateStatus(ctx context.Context, foo *Foo) (*Foo, error) {
	out := &Foo{}
	err := f.rc.Put().Namespace(f.ns).Resource(Resource.Resource).Name(foo.Name).SubResource("status").Body(foo).Do(ctx).Into(out)
	return out, err
}

// Delete deletes a Foo.
func (f *Foos) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return f.rc.Delete().Namespace(f.ns).Resource(Resource.Resource).Name(name).Body(&opts).Do(ctx).Error()
}
