package manager

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Object is what the manager caches: a Kubernetes API type with object
// metadata, registered in the manager's scheme (*corev1.Pod,
// *appsv1.Deployment, a custom resource's Go type, ...). It is
// object.APIObject, as client.Object and apply.Object are.
type Object = object.APIObject

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
		Mapping() (*meta.RESTMapping, error)
	}
	scope Scope
	// cut is how the informer is cut by shard (cutNone, ...), decided by
	// Run before the informer first lists; relist is its Relist.
	cut    *atomic.Int32
	relist func(context.Context, error) error
	late   bool           // created while the manager ran: its sync does not make the replica unready
	key    informer.Scope // the factory's
	writes *tracking      // the ledger's record of its cache
}

// tracking is how to take an informer's cache out of the ledger, once its
// resource is known and the ledger was told; guarded by Manager.mu.
type tracking struct{ remove func() }

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
// informer asked for after Run started starts at once. Each call takes a
// reference to the informer, which ReleaseInformer gives back; the last
// release stops it.
func Informer[T Object](m *Manager, scope Scope) *informer.SharedIndexInformer[T] {
	gvk, err := m.kindOf(newObject[T]())
	if err == nil {
		var inf *informer.SharedIndexInformer[T]
		if inf, err = sharedInformer(m, gvk, scope, "", func(opts listwatch.KindOptions) (*listwatch.KindListerWatcher[T], error) {
			return listwatch.Kind[T](m.discovery, gvk, opts), nil
		}); err == nil {
			return inf
		}
	}
	return unusable[T](m, err)
}

// unusable records err for Run to report and returns an informer that
// caches nothing and never fails, for a caller that needs no error check.
func unusable[T Object](m *Manager, err error) *informer.SharedIndexInformer[T] {
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
	inf, _ := informer.New(failing[T](err), informer.Options[T]{Name: fmt.Sprintf("%T (unusable)", newObject[T]()),
		FactoryOptions: informer.FactoryOptions{DetectMutations: informer.DetectNever}})
	return inf
}

// failing is a ListerWatcher whose every call fails with err.
func failing[T Object](err error) reflector.ListerWatcher[T] {
	return listwatch.New[T](
		func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, err },
		func(context.Context, metav1.ListOptions) (watch.Interface, error) { return nil, err },
		listwatch.Options{})
}

// Projection returns the shared informer of P, a projection of the API
// type F (see package projection), in scope: it lists and watches F's
// resource and decodes each object straight from the wire into P, so the
// cache holds, and the process ever builds, only P's fields (for a Pod,
// say, its metadata, spec.nodeName and status.phase). It is an informer
// like Informer's: Reader, For, Owns, Watches, sharding and the debug page
// work with it; it is another informer than F's own in the same scope.
//
// P embeds metav1.TypeMeta and metav1.ObjectMeta and has DeepCopyObject
// (controller-gen's object:root), and names its fields as F does (json
// tags); F (e.g. corev1.Pod) must be in the manager's scheme. A P that
// does not fit F makes Run fail at start, naming each field. Do not use a
// projection to write the object back: an update would drop every field P
// lacks (apply or patch only the fields you own). Its cache shares equal
// label and annotation maps between objects (informer.FactoryOptions.
// ShareMaps): like every cached object, a projection is read-only.
func Projection[P Object, F any](m *Manager, scope Scope) *informer.SharedIndexInformer[P] {
	full, ok := reflect.New(reflect.TypeFor[F]()).Interface().(runtime.Object)
	err := fmt.Errorf("manager: projection %T: %v is not an API type", newObject[P](), reflect.TypeFor[F]())
	if ok {
		var gvk schema.GroupVersionKind
		if gvk, err = m.kindOf(full); err == nil {
			var inf *informer.SharedIndexInformer[P]
			if inf, err = sharedInformer(m, gvk, scope, reflect.TypeFor[P]().Elem().Name(),
				func(opts listwatch.KindOptions) (*listwatch.KindListerWatcher[P], error) {
					return listwatch.Projected[P, F](m.discovery, gvk, opts)
				}); err == nil {
				m.mu.Lock()
				m.projections[reflect.TypeFor[P]()] = gvk
				m.mu.Unlock()
				return inf
			}
		}
	}
	return unusable[P](m, err)
}

// sharedInformer returns the factory's informer of gvk in scope, decoded
// as the type T by the adapter build makes (as is T's name for a
// projection, else "").
func sharedInformer[T Object](m *Manager, gvk schema.GroupVersionKind, scope Scope, as string,
	build func(listwatch.KindOptions) (*listwatch.KindListerWatcher[T], error)) (*informer.SharedIndexInformer[T], error) {
	plural, _ := meta.UnsafeGuessKindToResource(gvk) // a stable name for sharing; the real one comes from discovery
	key := informer.Scope{Resource: plural, Namespace: scope.Namespace, LabelSelector: scope.LabelSelector,
		FieldSelector: scope.FieldSelector, As: as}
	var lw *listwatch.KindListerWatcher[T]
	var buildErr error
	cut := new(atomic.Int32)
	name := key.String() // the informer's name, as the factory gives it
	inf, err := informer.For(m.factory, key, func() reflector.ListerWatcher[T] {
		received, sinceList := m.received.bytes.WithLabelValues(name), m.received.sinceList.WithLabelValues(name)
		lw, buildErr = build(listwatch.KindOptions{
			Options:                  m.cutOptions(listwatch.Options{LabelSelector: scope.LabelSelector, FieldSelector: scope.FieldSelector}, cut, name),
			Namespace:                scope.Namespace,
			ReceivedBytes:            func(n int) { received.Add(float64(n)); sinceList.Add(float64(n)) },
			ListStarted:              func() { sinceList.Set(0) },
			KeepManagedFields:        m.opts.Informers.KeepManagedFields,
			KeepManagedFieldsOf:      m.opts.Informers.KeepManagedFieldsOf,
			KeepManagedFieldsOfAdded: m.keep,
		})
		if buildErr != nil {
			return failing[T](buildErr)
		}
		return lw
	})
	if err == nil {
		err = buildErr
	}
	if err != nil {
		return nil, fmt.Errorf("manager: informer of %s: %w", gvk.Kind, err)
	}
	if lw != nil { // created now
		writes := &tracking{}
		m.mu.Lock()
		m.informers = append(m.informers, informerEntry{name: inf.Name(), gvk: gvk, lw: lw, scope: scope, cut: cut, relist: inf.Relist,
			late: m.once.Started(), key: key, writes: writes})
		m.mu.Unlock()
		track, err := trackWrites(m, inf, scope, writes)
		if err != nil {
			return nil, err
		}
		lw.OnMapped(track)
	}
	m.mu.Lock()
	m.refs[inf.Name()]++
	m.mu.Unlock()
	return inf, nil
}

// trackWrites returns what tells the ledger about inf's cache once its
// resource is known. (The sources of a controller that reads its own writes
// feed the ledger inf's events; see observing.)
func trackWrites[T Object](m *Manager, inf *informer.SharedIndexInformer[T], scope Scope, writes *tracking) (func(*meta.RESTMapping), error) {
	sel, err := labels.Parse(scope.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("manager: label selector %q: %w", scope.LabelSelector, err)
	}
	cache := inf.Reader()
	return func(mp *meta.RESTMapping) {
		remove := m.ledger.Track(mp.Resource.GroupResource(), ledger.Cache{
			Lookup: func(n object.ObjectName) (string, bool) {
				obj, ok := cache.Get(n)
				if !ok {
					return "", false
				}
				return obj.GetResourceVersion(), true
			},
			Holds: func(ns string, l map[string]string) bool {
				return (scope.Namespace == "" || ns == scope.Namespace) && sel.Matches(labels.Set(l))
			},
		})
		m.mu.Lock()
		writes.remove = remove
		m.mu.Unlock()
	}, nil
}

// resourceOf returns the resource of the informer called name, once the
// server told it.
func (m *Manager) resourceOf(name string) (schema.GroupResource, bool) {
	m.mu.Lock()
	var lw interface {
		Mapping() (*meta.RESTMapping, error)
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
	mp, err := lw.Mapping()
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

// kindOf returns the group, version and kind of obj from the scheme, or
// of the type it is a projection of.
func (m *Manager) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return schema.GroupVersionKind{}, fmt.Errorf("manager: %T is not a pointer to an API type", obj)
	}
	m.mu.Lock()
	gvk, projected := m.projections[reflect.TypeOf(obj)]
	m.mu.Unlock()
	if projected {
		return gvk, nil
	}
	gvks, _, err := m.scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf(
			"manager: %T is not in the manager's scheme; register it with Options.AddToScheme: %w", obj, err)
	}
	return gvks[0], nil
}
