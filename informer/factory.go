package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// ErrTypeMismatch reports asking a Factory for an informer it already holds
// with another object type.
var ErrTypeMismatch = errors.New("informer: resource already shared with another type")

// FactoryOptions configure a Factory and every informer it creates. The
// zero value means the defaults of Options.
type FactoryOptions struct {
	// Reflector configures the reflector of every informer. Its Name is not
	// used (each reflector is named after its informer); its Logger and
	// Registerer, when empty, are the factory's. Default: the reflector's
	// defaults.
	Reflector reflector.Options
	// KeepManagedFields keeps metadata.managedFields in the caches.
	KeepManagedFields bool
	// Logger receives the informers' log lines. Default: discard.
	Logger *slog.Logger
	// Registerer receives every informer's metrics. Default: none.
	Registerer prometheus.Registerer
}

// Factory shares one informer per resource and namespace between the
// controllers of a process, so each resource is listed, watched and cached
// once. Get informers with For, then Start them and WaitForCacheSync. Safe
// for concurrent use.
type Factory struct {
	opts FactoryOptions
	wg   sync.WaitGroup

	mu        sync.Mutex // guards informers
	informers map[shareKey]*shared
}

type shareKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// shared is the type-erased view of one informer the Factory needs.
type shared struct {
	name    string
	inf     any // *SharedIndexInformer[T]
	run     func(context.Context) error
	synced  <-chan struct{}
	lastErr func() error
	started bool
}

// NewFactory returns an empty Factory; it starts nothing.
func NewFactory(opts FactoryOptions) *Factory {
	return &Factory{opts: opts, informers: map[shareKey]*shared{}}
}

// For returns the informer of resource gvr in namespace ("" for every
// namespace, or a cluster-scoped resource), creating it with a
// ListerWatcher from newLW on first use. Every caller gets the same
// informer; asking again with another T fails with ErrTypeMismatch. An
// informer added after Start runs at the next Start.
func For[T object.Object](f *Factory, gvr schema.GroupVersionResource, namespace string, newLW func() listwatch.ListerWatcher[T]) (*SharedIndexInformer[T], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := shareKey{gvr: gvr, namespace: namespace}
	if s, ok := f.informers[key]; ok {
		inf, ok := s.inf.(*SharedIndexInformer[T])
		if !ok {
			var zero T
			return nil, fmt.Errorf("%w: %s is %T, not %T", ErrTypeMismatch, s.name, s.inf, zero)
		}
		return inf, nil
	}
	name := displayName(gvr, namespace)
	ro := f.opts.Reflector
	ro.Name = ""
	inf, err := New(newLW(), Options[T]{Name: name, Reflector: ro,
		KeepManagedFields: f.opts.KeepManagedFields, Logger: f.opts.Logger, Registerer: f.opts.Registerer})
	if err != nil {
		return nil, err
	}
	f.informers[key] = &shared{name: name, inf: inf, run: inf.Run, synced: inf.Synced(), lastErr: inf.LastError}
	return inf, nil
}

// displayName names an informer: "deployments.apps/v1 in namespace web",
// "nodes/v1".
func displayName(gvr schema.GroupVersionResource, namespace string) string {
	name := gvr.Resource
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	name += "/" + gvr.Version
	if namespace != "" {
		name += " in namespace " + namespace
	}
	return name
}

// Start runs every informer not yet started until ctx ends. It does not
// block; Wait waits for them to stop.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.informers {
		if !s.started {
			s.started = true
			f.wg.Go(func() {
				if err := s.run(ctx); err != nil && f.opts.Logger != nil {
					f.opts.Logger.Error("informer: run failed", "informer", s.name, "err", err)
				}
			})
		}
	}
}

// Wait blocks until every informer started by Start has returned, that is
// after the contexts given to Start have ended.
func (f *Factory) Wait() { f.wg.Wait() }

// WaitForCacheSync blocks until every started informer has synced, and
// returns nil, or until ctx ends. Then it returns an error naming each
// informer that has not synced and why, from its last list or watch error:
// 403 Forbidden (with the verb and resource the server refused), resource
// not found (a missing CustomResourceDefinition or wrong version), or
// another error; and ctx's error when no informer reported one.
func (f *Factory) WaitForCacheSync(ctx context.Context) error {
	f.mu.Lock()
	var started []*shared
	for _, s := range f.informers {
		if s.started {
			started = append(started, s)
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, s := range started {
		select {
		case <-s.synced:
			continue
		case <-ctx.Done():
		}
		select {
		case <-s.synced: // both were ready
			continue
		default:
		}
		errs = append(errs, syncCause(ctx, s.name, s.lastErr()))
	}
	return errors.Join(errs...)
}

// syncFailure says why a cache did not sync. It unwraps to the informer's
// last error (a *reflector.Error), or to ctx's cause when there was none.
type syncFailure struct {
	msg string
	err error
}

func (e *syncFailure) Error() string { return e.msg }
func (e *syncFailure) Unwrap() error { return e.err }

// syncCause explains why the cache of informer name did not sync, from its
// reflector's last error.
func syncCause(ctx context.Context, name string, err error) error {
	prefix := "informer: cache of " + name + " did not sync: "
	var rerr *reflector.Error
	if !errors.As(err, &rerr) {
		if err == nil {
			err = context.Cause(ctx)
			return &syncFailure{msg: prefix + "no list or watch error reported: " + err.Error(), err: err}
		}
		return &syncFailure{msg: prefix + "last error: " + err.Error(), err: err}
	}
	var hint string
	switch rerr.Code {
	case http.StatusForbidden:
		hint = fmt.Sprintf("forbidden (403): the credentials may not %s it (grant the verb with RBAC): ", rerr.Op)
	case http.StatusNotFound:
		hint = "resource not found (404): is its CustomResourceDefinition installed and served at this version? "
	default:
		return &syncFailure{msg: prefix + "last error: " + rerr.Error(), err: err}
	}
	return &syncFailure{msg: prefix + hint + rerr.Err.Error(), err: err}
}
