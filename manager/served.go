package manager

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
)

// Served is what a WhenServed setup made: the controllers to remove and
// the informers to release (each as often as setup asked for it) when the
// resource stops being served.
type Served struct {
	Controllers []*Controller
	Informers   []interface{ Name() string }
}

// WhenServed runs setup once the API server serves gvk, a custom
// resource: its CustomResourceDefinition exists, is Established and
// serves gvk's version. setup adds what needs the resource (its informers,
// the controllers over them) and returns it; when the resource is no
// longer served (the CRD deleted, or the version no longer served) the
// manager removes those controllers and releases those informers, which
// stops them, and when it is served again setup runs again. Meanwhile the
// replica stays ready: nothing of the resource counts for /readyz until
// setup ran and its caches synced.
//
// It watches that one CRD only, by name (the kind's plural from
// Options.CRDs, else the lower-case plural, and its group): one small
// watch, no discovery of the whole API. setup runs on that watch's
// handler goroutine, one call at a time; an error is logged and setup is
// tried again at the CRD's next change. WhenServed works before and while
// the manager runs (not on a sharded manager while it runs: see
// ErrShardedLate); the manager needs list and watch on
// customresourcedefinitions (Manifests grants it).
func WhenServed(m *Manager, gvk schema.GroupVersionKind, setup func() (Served, error)) error {
	if gvk.Group == "" || gvk.Version == "" || gvk.Kind == "" {
		return fmt.Errorf("manager: WhenServed(%v): want a custom resource's group, version and kind", gvk)
	}
	if setup == nil {
		return errors.New("manager: WhenServed: nil setup")
	}
	name := m.plurals().resource(gvk).Resource + "." + gvk.Group
	crds := Informer[*apiextensionsv1.CustomResourceDefinition](m, Scope{FieldSelector: "metadata.name=" + name})
	w := &servedWatch{m: m, gvk: gvk, crd: name, setup: setup}
	m.mu.Lock()
	m.served = append(m.served, w)
	m.mu.Unlock()
	_, err := crds.AddEventHandler(handler.Funcs[*apiextensionsv1.CustomResourceDefinition]{
		AddFunc:    func(crd *apiextensionsv1.CustomResourceDefinition, _ bool) { w.judge(crd) },
		UpdateFunc: func(_, crd *apiextensionsv1.CustomResourceDefinition) { w.judge(crd) },
		DeleteFunc: func(object.Deleted[*apiextensionsv1.CustomResourceDefinition]) { w.judge(nil) },
	}, informer.HandlerOptions{Name: "served " + gvk.String()})
	if err != nil {
		return fmt.Errorf("manager: WhenServed(%v): %w", gvk, err)
	}
	return nil
}

// servedWatch sets up and undoes what needs one resource as its CRD comes
// and goes. Its methods run on its handler's goroutine, one at a time.
type servedWatch struct {
	m     *Manager
	gvk   schema.GroupVersionKind
	crd   string
	setup func() (Served, error)
	up    *Served // what setup made; nil while the resource is not served
	// serving is up != nil, for /readyz?verbose and the debug page.
	serving atomic.Bool
}

// waitingFor returns the WhenServed watches whose resource is not served.
func (m *Manager) waitingFor() []*servedWatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*servedWatch
	for _, w := range m.served {
		if !w.serving.Load() {
			out = append(out, w)
		}
	}
	return out
}

// judge sets up or undoes after a change of the CRD (nil: deleted).
func (w *servedWatch) judge(crd *apiextensionsv1.CustomResourceDefinition) {
	log := w.m.opts.Logger.With("kind", w.gvk.String(), "crd", w.crd)
	switch serves := servesVersion(crd, w.gvk.Version); {
	case serves && w.up == nil:
		made, err := w.setup()
		if err != nil {
			log.Error("manager: the resource is served, but its setup failed; trying again at the CRD's next change", "err", err)
			w.undo(made)
			return
		}
		w.up = &made
		w.serving.Store(true)
		log.Info("manager: the resource is served: its controllers start", "controllers", len(made.Controllers))
	case !serves && w.up != nil:
		w.undo(*w.up)
		w.up = nil
		w.serving.Store(false)
		log.Info("manager: the resource is no longer served: its controllers and informers stopped")
	}
}

// undo removes the controllers and releases the informers of made.
func (w *servedWatch) undo(made Served) {
	for _, c := range made.Controllers {
		if c == nil {
			continue
		}
		if err := w.m.RemoveController(c); err != nil && !errors.Is(err, ErrNoController) {
			w.m.opts.Logger.Error("manager: stopping a controller of a resource no longer served", "controller", c.Name(), "err", err)
		}
	}
	for _, inf := range made.Informers {
		if inf != nil {
			_ = w.m.ReleaseInformer(inf) // ErrNoInformer: released already
		}
	}
}

// servesVersion reports whether crd exists, is Established, is not being
// deleted and serves version.
func servesVersion(crd *apiextensionsv1.CustomResourceDefinition, version string) bool {
	if crd == nil || crd.DeletionTimestamp != nil {
		return false
	}
	established := slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
		return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
	})
	return established && slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == version && v.Served
	})
}
