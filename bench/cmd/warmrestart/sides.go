package main

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/snapshot"
	"github.com/ctrlkit/ctrlkit/store"
)

// counters are a handler's notifications, counted as they come, and the
// handler's view: name -> resource version of what it was told exists.
type counters struct {
	initialAdds, adds, updates, deletes atomic.Int64

	mu   sync.Mutex
	seen map[string]string
}

func (c *counters) add(obj *corev1.ConfigMap, initial bool) {
	if initial {
		c.initialAdds.Add(1)
	} else {
		c.adds.Add(1)
	}
	c.see(obj.Name, obj.ResourceVersion)
}

func (c *counters) update(obj *corev1.ConfigMap) {
	c.updates.Add(1)
	c.see(obj.Name, obj.ResourceVersion)
}

func (c *counters) delete(name string) {
	c.deletes.Add(1)
	c.see(name, "")
}

// see records that the handler was told name is at rv ("": deleted).
func (c *counters) see(name, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]string{}
	}
	if rv == "" {
		delete(c.seen, name)
	} else {
		c.seen[name] = rv
	}
}

func (c *counters) heard() heard {
	return heard{InitialAdds: c.initialAdds.Load(), Adds: c.adds.Load(), Updates: c.updates.Load(), Deletes: c.deletes.Load()}
}

// behind returns the keys on which the handler's view differs from the
// cache's objects, sorted.
func (c *counters) behind(objs []*corev1.ConfigMap) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, o := range objs {
		if c.seen[o.Name] != o.ResourceVersion {
			out = append(out, o.Name)
		}
	}
	if len(c.seen) != len(objs) {
		cached := make(map[string]bool, len(objs))
		for _, o := range objs {
			cached[o.Name] = true
		}
		for name := range c.seen {
			if !cached[name] {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// handlersCaughtUp waits up to convergeWithin for the handler's view to
// equal the cache's, and returns the keys on which it still differs as
// "handler view: KEY". Handlers are called after the cache is updated.
func handlersCaughtUp(ctx context.Context, c *counters, view cacheView) ([]string, error) {
	deadline := time.Now().Add(convergeWithin)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		bad := c.behind(view())
		if len(bad) == 0 || time.Now().After(deadline) {
			for i := range bad {
				bad[i] = "handler view: " + bad[i]
			}
			return bad, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// ctrlkitHandler counts into c.
func (c *counters) ctrlkitHandler() handler.Handler[*corev1.ConfigMap] {
	return handler.Funcs[*corev1.ConfigMap]{
		AddFunc:    c.add,
		UpdateFunc: func(_, obj *corev1.ConfigMap) { c.update(obj) },
		DeleteFunc: func(d object.Deleted[*corev1.ConfigMap]) { c.delete(d.Name.Name) },
	}
}

// clientGoHandler counts into c.
func (c *counters) clientGoHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { c.add(obj.(*corev1.ConfigMap), initial) },
		UpdateFunc: func(_, obj any) { c.update(obj.(*corev1.ConfigMap)) },
		DeleteFunc: func(obj any) { c.delete(deletedName(obj)) },
	}
}

// deletedName is the name of an object client-go's handler is told was
// deleted, which may be a tombstone.
func deletedName(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return cm.Name
	}
	return ""
}

// snapshotConfig is the ctrlkit child's snapshot: in dir, of the
// ConfigMaps of the bench namespace on this cluster, written at shutdown.
func snapshotConfig(ctx context.Context, kube kubernetes.Interface, cfg *rest.Config, dir string) (informer.Snapshot[*corev1.ConfigMap], error) {
	ks, err := kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return informer.Snapshot[*corev1.ConfigMap]{}, err
	}
	return informer.Snapshot[*corev1.ConfigMap]{
		Path:     filepath.Join(dir, "configmaps.snap"),
		Interval: -1,
		Identity: snapshot.Identity{Cluster: string(ks.UID), Server: cfg.Host, Version: "v1", Resource: "configmaps", Namespace: namespace},
	}, nil
}

// runCtrlkit measures one start of a ctrlkit informer with a snapshot:
// sync, convergence, and the snapshot write at shutdown.
func runCtrlkit(ctx context.Context, kube kubernetes.Interface, cfg *rest.Config, c childConfig, counter *byteCounter) (result, error) {
	snap, err := snapshotConfig(ctx, kube, cfg, c.Dir)
	if err != nil {
		return result{}, err
	}
	cms := kube.CoreV1().ConfigMaps(namespace)
	inf, err := informer.New(listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{}),
		informer.Options[*corev1.ConfigMap]{Snapshot: snap, FactoryOptions: informer.FactoryOptions{DetectMutations: informer.DetectNever}})
	if err != nil {
		return result{}, err
	}
	// Keep the namespace index from the start, as client-go's side (given
	// cache.NamespaceIndex) does: ctrlkit's store keeps it from its first
	// read on.
	_, _ = inf.Reader().ByIndex(store.NamespaceIndex, "")
	var count counters
	if _, err := inf.AddEventHandler(count.ctrlkitHandler(), informer.HandlerOptions{}); err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	m := startMeter(counter)
	go func() { done <- inf.Run(runCtx) }()
	res := result{Side: sideCtrlkit}
	if err := waitSynced(ctx, c.Timeout, inf.HasSynced); err != nil {
		cancel()
		<-done
		return result{}, err
	}
	m.synced(&res)
	reader := inf.Reader()
	res.Divergent, err = check(ctx, cms, &count, func() []*corev1.ConfigMap { return reader.List("", nil) })
	if err != nil {
		cancel()
		<-done
		return result{}, err
	}
	res.Heard, res.Cached = count.heard(), reader.Len()
	start := inf.CacheStart()
	res.Warm, res.Reason, res.SnapshotObjects = start.Warm, start.Reason, start.Objects
	res.Snapshot, err = stopAndWrite(cancel, done, inf.SnapshotStats)
	return res, err
}

// stopAndWrite cancels the informer, waits for Run to return (having
// written the snapshot) and reports the write.
func stopAndWrite(cancel context.CancelFunc, done <-chan error, stats func() informer.SnapshotStats) (writeCost, error) {
	cpu, t0 := cpuTime(), time.Now()
	cancel()
	err := <-done
	w := writeCost{StopMS: ms(time.Since(t0)), CPUMS: ms(cpuTime() - cpu)}
	s := stats()
	w.Writes, w.Failures, w.Objects, w.Bytes = s.Writes, s.Failures, s.LastObjects, s.LastBytes
	w.WriteMS, w.PauseMS = ms(s.LastDuration), ms(s.LastPause)
	if s.LastErr != nil {
		w.Err = s.LastErr.Error()
	}
	return w, err
}

// runClientGo measures one cold start of client-go's shared informer over
// the same protobuf clientset, for reference.
func runClientGo(ctx context.Context, kube kubernetes.Interface, c childConfig, counter *byteCounter) (result, error) {
	cms := kube.CoreV1().ConfigMaps(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cms.Watch(ctx, o) },
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var count counters
	if _, err := inf.AddEventHandler(count.clientGoHandler()); err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	m := startMeter(counter)
	go func() { defer close(done); inf.RunWithContext(runCtx) }()
	defer func() { cancel(); <-done }()
	res := result{Side: sideClientGo, Reason: "client-go lists at every start"}
	if err := waitSynced(ctx, c.Timeout, inf.HasSynced); err != nil {
		return result{}, err
	}
	m.synced(&res)
	var err error
	res.Divergent, err = check(ctx, cms, &count, storeView(inf.GetStore()))
	res.Heard, res.Cached = count.heard(), len(inf.GetStore().ListKeys())
	return res, err
}

// storeView is the view of a client-go store of ConfigMaps.
func storeView(s cache.Store) cacheView {
	return func() []*corev1.ConfigMap {
		objs := s.List()
		out := make([]*corev1.ConfigMap, 0, len(objs))
		for _, o := range objs {
			out = append(out, o.(*corev1.ConfigMap))
		}
		return out
	}
}

// check returns the keys on which the cache differs from the server's
// (see converge), and then those on which the handler's view differs from
// the cache's (see handlersCaughtUp).
func check(ctx context.Context, cms typedcorev1.ConfigMapInterface, count *counters, view cacheView) ([]string, error) {
	bad, err := converge(ctx, cms, view)
	if err != nil {
		return nil, err
	}
	behind, err := handlersCaughtUp(ctx, count, view)
	return append(bad, behind...), err
}
