package manager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
// handler goroutine (a retry on a timer's), one call at a time; an error
// is logged and setup is
// tried again after a backoff (1s, doubling to a minute) and at the CRD's
// next change; /readyz?verbose and the debug page show the error meanwhile.
// What a failed setup returned in its Served is removed and released, so
// a setup returns what it made so far with its error. WhenServed works
// before and while the manager runs (not on a sharded manager while it runs: see
// ErrShardedLate); the manager needs list and watch on
// customresourcedefinitions, and its setups' informers get, list and
// watch on the resource (Manifests grants both, the resource in every
// namespace; their writes go in Options.Permissions).
func WhenServed(m *Manager, gvk schema.GroupVersionKind, setup func() (Served, error)) error {
	if gvk.Group == "" || gvk.Version == "" || gvk.Kind == "" {
		return fmt.Errorf("manager: WhenServed(%v): want a custom resource's group, version and kind", gvk)
	}
	if setup == nil {
		return errors.New("manager: WhenServed: nil setup")
	}
	name := m.plurals().resource(gvk).Resource + "." + gvk.Group
	crds := Informer[*apiextensionsv1.CustomResourceDefinition](m, Scope{FieldSelector: "metadata.name=" + name})
	w := &servedWatch{m: m, gvk: gvk, crd: name, setup: setup, crds: crds.Reader(), stopped: crds.IsStopped}
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
	crds  interface { // the CRD's cache (a store.Reader), for a retry
		Get(object.ObjectName) (*apiextensionsv1.CustomResourceDefinition, bool)
	}
	stopped func() bool // the CRD's informer has stopped: no more retries

	// mu serializes judge: the handler's calls and a retry's.
	mu sync.Mutex
	up *Served // what setup made; nil while the resource is not served
	// retry, while setup keeps failing on a served resource, runs judge
	// again after backoff (1s, doubling to a minute).
	retry   *time.Timer
	backoff time.Duration
	// serving is up != nil; failed is the last setup's error while setups
	// keep failing (nil otherwise); both for /readyz?verbose and the debug
	// page, read without mu.
	serving atomic.Bool
	failed  atomic.Pointer[string]
}

// Setup retries of a served resource whose setup failed.
const (
	servedRetryFirst = time.Second
	servedRetryMax   = time.Minute
)

// waiting says why w's controllers are not running: its resource is not
// served yet, or its setup failed (and is retried).
func (w *servedWatch) waiting() string {
	if why := w.failed.Load(); why != nil {
		return fmt.Sprintf("%s is served, but its setup failed (tried again with backoff): %s", w.gvk, *why)
	}
	return fmt.Sprintf("%s is not served yet; its controllers start when it is", w.gvk)
}

// laterKindsLocked returns the kinds whose informers come while the
// manager runs, in scopes the manifests cannot know: the namespace sets'
// (their namespaces change at runtime) and the WhenServed kinds' (their
// setups choose). m.mu is held.
func (m *Manager) laterKindsLocked() []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, name := range slices.Sorted(maps.Keys(m.sets)) {
		out = append(out, m.sets[name].kind())
	}
	for _, w := range m.served {
		out = append(out, w.gvk)
	}
	return out
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

// judge sets up or undoes after a change of the CRD (nil: deleted). A
// setup that fails on a served resource is tried again after a backoff
// (1s, doubling to a minute) and at the CRD's next change, until it
// succeeds, the resource is no longer served or the manager stops.
func (w *servedWatch) judge(crd *apiextensionsv1.CustomResourceDefinition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.m.opts.Logger.With("kind", w.gvk.String(), "crd", w.crd)
	serves := servesVersion(crd, w.gvk.Version)
	if !serves {
		w.stopRetry() // nothing to retry, nor any failure to report
	}
	switch {
	case serves && w.up == nil:
		made, err := w.setup()
		if err != nil {
			w.undo(made)
			why := err.Error()
			w.failed.Store(&why)
			w.backoff = min(max(2*w.backoff, servedRetryFirst), servedRetryMax)
			log.Error("manager: the resource is served, but its setup failed; trying again", "after", w.backoff, "err", err)
			if w.retry != nil {
				w.retry.Stop() // a CRD change ran this before the pending retry
			}
			w.retry = time.AfterFunc(w.backoff, w.again)
			return
		}
		w.stopRetry()
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

// again is a retry of a failed setup: judge on the cached CRD, unless the
// manager has stopped (the CRD's informer with it).
func (w *servedWatch) again() {
	if w.stopped() {
		return
	}
	crd, _ := w.crds.Get(object.ObjectName{Name: w.crd})
	w.judge(crd)
}

// stopRetry ends the retries and forgets the failure. Called with w.mu held.
func (w *servedWatch) stopRetry() {
	if w.retry != nil {
		w.retry.Stop()
		w.retry = nil
	}
	w.backoff = 0
	w.failed.Store(nil)
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
