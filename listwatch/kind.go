package listwatch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Discovery is what Kind needs to reach a kind it knows only by group,
// version and kind. Every field is required.
type Discovery struct {
	// Config is what the REST clients are built from; Kind sets the group
	// version, API path and serializer of each.
	Config *rest.Config
	// HTTPClient carries every request (shared by every Kind adapter of a
	// process, so they share connections).
	HTTPClient *http.Client
	// Mapper resolves a kind's resource and scope. Kind resets it when the
	// kind is not served: its CustomResourceDefinition may have been
	// installed since the mapper cached discovery.
	Mapper meta.ResettableRESTMapper
	// Serializer decodes the kind's objects, e.g. a scheme's
	// serializer.NewCodecFactory(scheme).WithoutConversion().
	Serializer runtime.NegotiatedSerializer
}

// NewDiscovery returns the Discovery of the API server of cfg, over hc,
// decoding with scheme's types; its mapper reads the server's discovery of
// a group version the first time one of its kinds is mapped, and keeps the
// kinds' resources and scopes (Kind resets it when a kind is missing).
func NewDiscovery(cfg *rest.Config, hc *http.Client, scheme *runtime.Scheme) (Discovery, error) {
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return Discovery{}, err
	}
	return Discovery{Config: cfg, HTTPClient: hc, Serializer: serializer.NewCodecFactory(scheme).WithoutConversion(),
		Mapper: newGroupVersionMapper(dc)}, nil
}

// RESTClient returns a REST client of group version gv, built from
// d.Config with d.Serializer, over hc (d.HTTPClient when nil). A group
// version of Kubernetes' own types is read and written in protobuf, which
// costs a fraction of JSON to decode (bench/wire); others, custom resources
// among them, in JSON.
func (d Discovery) RESTClient(gv schema.GroupVersion, hc *http.Client) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(d.Config)
	if clientgoscheme.Scheme.IsVersionRegistered(gv) {
		cfg = PreferProtobuf(cfg)
	}
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = d.Serializer
	return rest.RESTClientForConfigAndClient(cfg, cmp.Or(hc, d.HTTPClient))
}

// KindOptions configure Kind.
type KindOptions struct {
	Options
	// Namespace limits a namespaced kind to one namespace; ignored for a
	// cluster-scoped one. Default: all.
	Namespace string
	// ReceivedBytes, when set, is called with the size of every piece of
	// response body read (lists and watches), e.g. to count an informer's
	// traffic.
	ReceivedBytes func(n int)
	// ListStarted, when set with ReceivedBytes, is called as each list
	// begins (its first page is requested, or a watch that sends the
	// initial events opens), before any of its bytes are reported: with
	// it a caller can tell what one list costs.
	ListStarted func()
	// KeepManagedFields makes Kind (for Kubernetes' own types) and
	// Projected (for a projection that declares them) decode
	// metadata.managedFields; by default they are skipped on the wire, as
	// an informer strips them after decoding (informer.FactoryOptions.
	// KeepManagedFields, which the manager passes on here).
	KeepManagedFields bool
	// KeepManagedFieldsOf, without KeepManagedFields, makes Kind keep the
	// managedFields entries of these field managers and skip the others
	// on the wire, before they are decoded (informer.FactoryOptions.
	// KeepManagedFieldsOf, which the manager passes on here): a
	// controller's own entry, which apply.Holds reads, costs nothing on the
	// objects it does not write. Projected decodes them all (the informer
	// strips the others).
	KeepManagedFieldsOf []string
	// KeepManagedFieldsOfAdded, when not nil, names more field managers
	// whose entries are kept, and may be added to while the informer runs
	// (the manager's, manager.Manager.KeepManagedFieldsOf): an object
	// decoded after an Add keeps its entries. Projected reads it once, when
	// made.
	KeepManagedFieldsOfAdded *intern.FieldManagers
}

// managedFields is what opts keep of metadata.managedFields.
func (opts KindOptions) managedFields() intern.ManagedFields {
	if opts.KeepManagedFields {
		return intern.ManagedFields{All: true}
	}
	return intern.ManagedFields{Of: opts.KeepManagedFieldsOf, Added: opts.KeepManagedFieldsOfAdded}
}

// KindListerWatcher lists and watches one kind through a REST client of its
// group and version. Build it with Kind.
type KindListerWatcher[T object.Object] struct {
	d    Discovery
	gvk  schema.GroupVersionKind
	opts KindOptions
	lw   reflector.ListerWatcher[T] // New over list and watch below

	mu       sync.Mutex // guards rc, mapped and onMapped
	rc       rest.Interface
	mapped   *meta.RESTMapping
	onMapped func(*meta.RESTMapping)

	interner metaInterner // see InternMetadata
}

// Kind adapts a kind known by group, version and kind (from a scheme) to
// the Reflector. The kind's resource and scope come from discovery at the
// first List or Watch, not here, and again while the server does not serve
// the kind: a custom resource whose CustomResourceDefinition is installed
// later is picked up by the reflector's next retry. Until then List and
// Watch fail with a 404 naming the kind.
//
// Kubernetes' own types (a group version of client-go's scheme, a type
// with generated protobuf decoding) are read in protobuf and decoded by
// Kind itself, straight from each list page and watch frame, skipping
// metadata.managedFields unless opts.KeepManagedFields (an informer that
// keeps them needs both): the same objects as the REST client's decoding
// gives, for less CPU and half the garbage. A watch event that does not
// decode is handed to the reflector as an undecodable object, which it skips
// and counts, as it does an undecodable list item (the REST client ended the
// watch instead). Other types, custom resources among them, go through the
// REST client.
func Kind[T object.Object](d Discovery, gvk schema.GroupVersionKind, opts KindOptions) *KindListerWatcher[T] {
	k := &KindListerWatcher[T]{d: d, gvk: gvk, opts: opts}
	if dec, ok := direct(k); ok {
		k.lw = New[T](dec.list, dec.watch, opts.Options)
	} else {
		k.lw = New[T](k.list, k.watch, opts.Options)
	}
	return k
}

// InternMetadata makes Kind intern the object metadata of every object it
// decodes itself (Kubernetes' own types) while decoding it, with an
// intern.Table of its own: a namespace, generateName, label key or value,
// annotation key or short value, or finalizer the table holds is never
// allocated (owner references are interned once decoded), and labels and
// annotations go into their maps once. It
// reports whether Kind will, false for types the REST client decodes. An
// informer calls it when it interns (unless it shares maps or has a
// transform of its own) and then interns only the rest of each object
// (intern.Table.Body). Call it before the first List or Watch; it cannot
// be undone.
func (k *KindListerWatcher[T]) InternMetadata() bool {
	in := &k.interner
	if !in.possible {
		return false
	}
	in.mu.Lock()
	if in.table == nil {
		in.table = intern.NewTable(0)
	}
	in.mu.Unlock()
	in.on.Store(true)
	return true
}

// List returns one page of the kind's objects.
func (k *KindListerWatcher[T]) List(ctx context.Context, opts metav1.ListOptions) (reflector.List[T], error) {
	return k.lw.List(ctx, opts)
}

// Watch watches the kind's objects.
func (k *KindListerWatcher[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return k.lw.Watch(ctx, opts)
}

// Mapping returns the kind's REST mapping, asking discovery again when the
// server did not serve the kind last time. A kind the server does not
// serve is a 404 error naming it.
func (k *KindListerWatcher[T]) Mapping() (*meta.RESTMapping, error) {
	return k.mapping(context.Background())
}

// mapping is Mapping, with ctx bounding the discovery request of NewDiscovery's
// mapper: a list or watch of a server that stopped answering (a partition, a
// stopped process) ends when its context does, not after the transport's
// timeouts.
func (k *KindListerWatcher[T]) mapping(ctx context.Context) (*meta.RESTMapping, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mapped != nil {
		return k.mapped, nil
	}
	mp, err := restMapping(ctx, k.d.Mapper, k.gvk.GroupKind(), k.gvk.Version)
	if meta.IsNoMatchError(err) {
		k.d.Mapper.Reset()
		mp, err = restMapping(ctx, k.d.Mapper, k.gvk.GroupKind(), k.gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("the server does not serve kind %s in %s (is its CustomResourceDefinition installed?)",
				k.gvk.Kind, k.gvk.GroupVersion()),
		}}
	}
	if err != nil {
		return nil, err
	}
	k.mapped = mp
	if fn := k.onMapped; fn != nil {
		k.onMapped = nil
		defer fn(mp) // after the unlock: fn may call Mapping
	}
	return mp, nil
}

// OnMapped makes fn run once, when the kind's resource is first known (at
// once if it is already).
func (k *KindListerWatcher[T]) OnMapped(fn func(*meta.RESTMapping)) {
	k.mu.Lock()
	mp := k.mapped
	if mp == nil {
		k.onMapped = fn
	}
	k.mu.Unlock()
	if mp != nil {
		fn(mp)
	}
}

// request starts a GET on the kind's resource in the adapter's namespace.
func (k *KindListerWatcher[T]) request(ctx context.Context, opts *metav1.ListOptions) (*rest.Request, error) {
	mp, err := k.mapping(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := k.client()
	if err != nil {
		return nil, err
	}
	return rc.Get().NamespaceIfScoped(k.opts.Namespace, mp.Scope.Name() == meta.RESTScopeNameNamespace).
		Resource(mp.Resource.Resource).VersionedParams(opts, metav1.ParameterCodec), nil
}

func (k *KindListerWatcher[T]) client() (rest.Interface, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rc != nil {
		return k.rc, nil
	}
	hc := k.d.HTTPClient
	if k.opts.ReceivedBytes != nil {
		c := *hc
		c.Transport = counting{next: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), n: k.opts.ReceivedBytes,
			listStarted: k.opts.ListStarted}
		hc = &c
	}
	rc, err := k.d.RESTClient(k.gvk.GroupVersion(), hc)
	if err != nil {
		return nil, err
	}
	k.rc = rc
	return rc, nil
}

func (k *KindListerWatcher[T]) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	req, err := k.request(ctx, &opts)
	if err != nil {
		return nil, err
	}
	return req.Do(ctx).Get()
}

func (k *KindListerWatcher[T]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req, err := k.request(ctx, &opts)
	if err != nil {
		return nil, err
	}
	return req.Watch(ctx)
}

// counting is an http.RoundTripper that reports the response body bytes read.
type counting struct {
	next        http.RoundTripper
	n           func(int)
	listStarted func() // optional
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.listStarted != nil && startsList(req.URL.Query()) {
		c.listStarted()
	}
	resp, err := c.next.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: c.n}
	}
	return resp, err
}

// startsList reports whether a request with query q begins a list: a
// list's first page, or a watch that sends the initial events.
func startsList(q url.Values) bool {
	if q.Get("continue") != "" {
		return false
	}
	watch, _ := strconv.ParseBool(q.Get("watch"))
	initial, _ := strconv.ParseBool(q.Get("sendInitialEvents"))
	return !watch || initial
}

type countingBody struct {
	io.ReadCloser
	n func(int)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.n(n)
	}
	return n, err
}
