package manager

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
)

// Object is what the manager caches: a Kubernetes API type with object
// metadata, registered in the manager's scheme (*corev1.Pod,
// *appsv1.Deployment, a custom resource's Go type, ...).
type Object interface {
	metav1.Object
	runtime.Object
}

// Scope selects what one informer lists and watches. The zero value is
// every object of the type.
type Scope struct {
	// Namespace limits the informer to one namespace. Default: all.
	Namespace string
	// LabelSelector and FieldSelector filter on the server, in the API's
	// syntax ("app=web,tier!=db"). Default: everything.
	LabelSelector string
	FieldSelector string
}

// informerEntry is what the manager keeps of each informer it handed out.
type informerEntry struct {
	name string
	gvk  schema.GroupVersionKind
	lw   interface {
		mapping() (*meta.RESTMapping, error)
	}
	scope Scope
	// cut is how the informer is cut by shard (cutNone, ...), decided by
	// Run before the informer first lists; relist is its Relist.
	cut    *atomic.Int32
	relist func(context.Context, error) error
}

// Informer returns the shared informer of T in scope, creating it on first
// use: every caller asking for the same type and scope gets the same
// informer, so each is listed, watched and cached once per process. Read
// its cache through Reader; pass it to For, Owns or Watches.
//
// T must be registered in the manager's scheme (Options.AddToScheme);
// if it is not, Run fails at start saying so (as does NewController with
// it), so this call needs no error check. The resource is looked up on the
// server when the informer lists, not here: a custom resource whose CRD is
// missing makes only its informer (and the controllers that use it) wait,
// retrying, with /readyz naming the cause, until the CRD is installed. An
// informer asked for after Run started starts at once.
func Informer[T Object](m *Manager, scope Scope) *informer.SharedIndexInformer[T] {
	gvk, err := m.kindOf(newObject[T]())
	if err == nil {
		var inf *informer.SharedIndexInformer[T]
		if inf, err = sharedInformer[T](m, gvk, scope); err == nil {
			return inf
		}
	}
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
	inf, _ := informer.New(listwatch.New[T](
		func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, err },
		func(context.Context, metav1.ListOptions) (watch.Interface, error) { return nil, err },
		listwatch.Options{}), informer.Options[T]{Name: fmt.Sprintf("%T (unusable)", newObject[T]())})
	return inf
}

// sharedInformer returns the factory's informer of gvk in scope.
func sharedInformer[T Object](m *Manager, gvk schema.GroupVersionKind, scope Scope) (*informer.SharedIndexInformer[T], error) {
	plural, _ := meta.UnsafeGuessKindToResource(gvk) // a stable name for sharing; the real one comes from discovery
	key := informer.Scope{Resource: plural, Namespace: scope.Namespace, LabelSelector: scope.LabelSelector,
		FieldSelector: scope.FieldSelector}
	var lw *restLW[T]
	cut := new(atomic.Int32)
	name := key.String() // the informer's name, as the factory gives it
	inf, err := informer.For(m.factory, key, func() listwatch.ListerWatcher[T] {
		lw = &restLW[T]{m: m, gvk: gvk, scope: scope, name: name}
		base := listwatch.Options{LabelSelector: scope.LabelSelector, FieldSelector: scope.FieldSelector}
		return &lazyLW[T]{build: func() listwatch.ListerWatcher[T] {
			return listwatch.New[T](lw.list, lw.watch, m.cutOptions(base, cut.Load(), name))
		}}
	})
	if err != nil {
		return nil, fmt.Errorf("manager: informer of %s: %w", gvk.Kind, err)
	}
	if lw != nil { // created now
		m.mu.Lock()
		m.informers = append(m.informers, informerEntry{name: inf.Name(), gvk: gvk, lw: lw, scope: scope, cut: cut, relist: inf.Relist})
		m.mu.Unlock()
		if err := trackWrites(m, inf, lw, scope); err != nil {
			return nil, err
		}
	}
	return inf, nil
}

// trackWrites tells the ledger about inf's cache once its resource is known.
// (The sources of a controller that reads its own writes feed the ledger
// inf's events; see observing.)
func trackWrites[T Object](m *Manager, inf *informer.SharedIndexInformer[T], lw *restLW[T], scope Scope) error {
	sel, err := labels.Parse(scope.LabelSelector)
	if err != nil {
		return fmt.Errorf("manager: label selector %q: %w", scope.LabelSelector, err)
	}
	idx := inf.Indexer()
	lw.setOnMapped(func(mp *meta.RESTMapping) {
		m.ledger.Track(mp.Resource.GroupResource(), ledger.Cache{
			Lookup: func(n object.ObjectName) (string, bool) {
				obj, ok := idx.GetByKey(n.String())
				if !ok {
					return "", false
				}
				return obj.GetResourceVersion(), true
			},
			Holds: func(ns string, l map[string]string) bool {
				return (scope.Namespace == "" || ns == scope.Namespace) && sel.Matches(labels.Set(l))
			},
		})
	})
	return nil
}

// resourceOf returns the resource of the informer called name, once the
// server told it.
func (m *Manager) resourceOf(name string) (schema.GroupResource, bool) {
	m.mu.Lock()
	var lw interface {
		mapping() (*meta.RESTMapping, error)
	}
	for _, e := range m.informers {
		if e.name == name {
			lw = e.lw
			break
		}
	}
	m.mu.Unlock()
	if lw == nil {
		return schema.GroupResource{}, false
	}
	mp, err := lw.mapping()
	if err != nil {
		return schema.GroupResource{}, false
	}
	return mp.Resource.GroupResource(), true
}

// newObject returns a new T: T is a pointer to a struct, as API types are.
func newObject[T Object]() T {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer {
		return zero
	}
	return reflect.New(t.Elem()).Interface().(T)
}

// kindOf returns the group, version and kind of obj from the scheme.
func (m *Manager) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return schema.GroupVersionKind{}, fmt.Errorf("manager: %T is not a pointer to an API type", obj)
	}
	gvks, _, err := m.scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf(
			"manager: %T is not in the manager's scheme; register it with Options.AddToScheme: %w", obj, err)
	}
	return gvks[0], nil
}

// restLW lists and watches one kind through a REST client of its group and
// version, resolving the kind's resource on the server at first use (and
// again while the server does not serve it).
type restLW[T Object] struct {
	m     *Manager
	gvk   schema.GroupVersionKind
	scope Scope
	name  string // the informer's, for the bytes it receives

	mu       sync.Mutex // guards rc, mapped and onMapped
	rc       rest.Interface
	mapped   *meta.RESTMapping
	onMapped func(*meta.RESTMapping) // called once, when mapped is first set
}

// setOnMapped makes fn run once the kind's mapping is known (at once if it
// is already).
func (l *restLW[T]) setOnMapped(fn func(*meta.RESTMapping)) {
	l.mu.Lock()
	mp := l.mapped
	if mp == nil {
		l.onMapped = fn
	}
	l.mu.Unlock()
	if mp != nil {
		fn(mp)
	}
}

// mapping returns the kind's REST mapping, asking discovery again when the
// server did not serve the kind last time. A kind the server does not
// serve is a 404 error naming it.
func (l *restLW[T]) mapping() (*meta.RESTMapping, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mapped != nil {
		return l.mapped, nil
	}
	mp, err := l.m.mapper.RESTMapping(l.gvk.GroupKind(), l.gvk.Version)
	if meta.IsNoMatchError(err) {
		l.m.mapper.Reset() // the CRD may have been installed since discovery was cached
		mp, err = l.m.mapper.RESTMapping(l.gvk.GroupKind(), l.gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("the server does not serve kind %s in %s (is its CustomResourceDefinition installed?)",
				l.gvk.Kind, l.gvk.GroupVersion()),
		}}
	}
	if err != nil {
		return nil, err
	}
	l.mapped = mp
	if fn := l.onMapped; fn != nil {
		l.onMapped = nil
		defer fn(mp) // fn takes no lock of l's
	}
	return mp, nil
}

// request starts a GET on the kind's resource in the informer's scope.
func (l *restLW[T]) request(opts *metav1.ListOptions) (*rest.Request, error) {
	mp, err := l.mapping()
	if err != nil {
		return nil, err
	}
	rc, err := l.client()
	if err != nil {
		return nil, err
	}
	return rc.Get().NamespaceIfScoped(l.scope.Namespace, mp.Scope.Name() == meta.RESTScopeNameNamespace).
		Resource(mp.Resource.Resource).VersionedParams(opts, metav1.ParameterCodec), nil
}

func (l *restLW[T]) client() (rest.Interface, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rc != nil {
		return l.rc, nil
	}
	cfg := rest.CopyConfig(l.m.cfg)
	gv := l.gvk.GroupVersion()
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = l.m.codecs.WithoutConversion()
	hc := *l.m.http
	hc.Transport = counting{next: l.m.http.Transport, n: l.m.received.bytes.WithLabelValues(l.name)}
	rc, err := rest.RESTClientForConfigAndClient(cfg, &hc)
	if err != nil {
		return nil, err
	}
	l.rc = rc
	return rc, nil
}

func (l *restLW[T]) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	req, err := l.request(&opts)
	if err != nil {
		return nil, err
	}
	return req.Do(ctx).Get()
}

func (l *restLW[T]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req, err := l.request(&opts)
	if err != nil {
		return nil, err
	}
	return req.Watch(ctx)
}
