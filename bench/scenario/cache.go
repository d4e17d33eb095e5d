package scenario

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/store"
)

// cacheSide is one side's running informer, as S2 and S4 use it: no queue,
// no workers, at most counting handlers.
type cacheSide[P any] interface {
	synced() bool
	get(key string) (P, bool)
	len() int
	resourceVersion() string // of the last list or event
	stop() error             // cancels and joins every goroutine
}

// cacheOptions configure startCache.
type cacheOptions struct {
	// stripClientGo gives client-go a transform that strips managedFields,
	// as ctrlkit does by default.
	stripClientGo bool
	// onAdd and onUpdate, if set, are a handler's functions.
	onAdd, onUpdate func()
	// atomic gives ctrlkit's informer AtomicRelist.
	atomic bool
}

// startCache starts an informer over src with the side's defaults and
// the namespace index (client-go is given it; ctrlkit's, kept from its first
// read, is read once before the start: see keepNamespaceIndex).
// Both sides list: ctrlkit with Reflector.DisableWatchList, client-go because src's
// ListerWatcher says it does not support watch-list.
func startCache[E any, P ptrObject[E]](ctx context.Context, side string, src *memSource[E, P], opts cacheOptions) (cacheSide[P], error) {
	ctx, cancel := context.WithCancel(ctx)
	if side == Ctrlkit {
		inf, err := informer.New[P](newCtrlkitLW(src), informer.Options[P]{FactoryOptions: informer.FactoryOptions{
			Reflector: reflector.Options{DisableWatchList: true}, DetectMutations: informer.DetectNever, AtomicRelist: opts.atomic}})
		if err == nil && (opts.onAdd != nil || opts.onUpdate != nil) {
			_, err = inf.AddEventHandler(handler.Funcs[P]{AddFunc: func(P, bool) { call(opts.onAdd) },
				UpdateFunc: func(_, _ P) { call(opts.onUpdate) }}, informer.HandlerOptions{})
		}
		if err != nil {
			cancel()
			return nil, err
		}
		keepNamespaceIndex(inf.Reader())
		c := &ctrlkitCache[P]{inf: inf, cancel: cancel}
		c.wg.Go(func() { c.err = inf.Run(ctx) })
		return c, nil
	}
	var zero E
	inf := cache.NewSharedIndexInformer(newClientGoLW(src), P(&zero), 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if opts.stripClientGo {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			cancel()
			return nil, err
		}
	}
	if opts.onAdd != nil || opts.onUpdate != nil {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { call(opts.onAdd) },
			UpdateFunc: func(_, _ any) { call(opts.onUpdate) }}); err != nil {
			cancel()
			return nil, err
		}
	}
	c := &clientGoCache[P]{inf: inf, cancel: cancel}
	c.wg.Go(func() { inf.RunWithContext(ctx) })
	return c, nil
}

func call(f func()) {
	if f != nil {
		f()
	}
}

// stripManagedFields is client-go's side of "the same transform".
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

type ctrlkitCache[P object.Object] struct {
	inf    *informer.SharedIndexInformer[P]
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    error
}

func (c *ctrlkitCache[P]) synced() bool             { return c.inf.HasSynced() }
func (c *ctrlkitCache[P]) get(key string) (P, bool) { return c.inf.Reader().GetByKey(key) }
func (c *ctrlkitCache[P]) len() int                 { return c.inf.Reader().Len() }
func (c *ctrlkitCache[P]) resourceVersion() string  { return c.inf.LastSyncResourceVersion() }
func (c *ctrlkitCache[P]) stop() error              { c.cancel(); c.wg.Wait(); return c.err }

type clientGoCache[P any] struct {
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *clientGoCache[P]) synced() bool { return c.inf.HasSynced() }
func (c *clientGoCache[P]) get(key string) (P, bool) {
	obj, ok, _ := c.inf.GetIndexer().GetByKey(key)
	p, isP := obj.(P)
	return p, ok && isP
}
func (c *clientGoCache[P]) len() int                { return len(c.inf.GetIndexer().ListKeys()) }
func (c *clientGoCache[P]) resourceVersion() string { return c.inf.LastSyncResourceVersion() }
func (c *clientGoCache[P]) stop() error             { c.cancel(); c.wg.Wait(); return nil }

// heapObjects is the bytes of heap objects, live or not yet swept: after a
// GC, the live heap (equal to runtime.MemStats.HeapAlloc, read without
// stopping the world).
const heapObjects = "/memory/classes/heap/objects:bytes"

// liveHeap collects garbage twice (the second cycle frees what the
// first one's finalizers and sweeps released) and returns heapObjects.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// keepNamespaceIndex makes a ctrlkit informer's store keep the namespace
// index from its start, as the client-go sides' informers (given
// cache.NamespaceIndex) do: ctrlkit keeps it from its first read on, and a
// store never read by namespace would do less work than client-go's.
func keepNamespaceIndex[T object.Object](r store.Reader[T]) {
	_, _ = r.ByIndex(store.NamespaceIndex, "")
}
