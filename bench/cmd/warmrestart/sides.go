package main

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// counters are a handler's notifications, counted as they come.
type counters struct {
	initialAdds, adds, updates, deletes atomic.Int64
}

func (c *counters) add(initial bool) {
	if initial {
		c.initialAdds.Add(1)
	} else {
		c.adds.Add(1)
	}
}

func (c *counters) heard() heard {
	return heard{InitialAdds: c.initialAdds.Load(), Adds: c.adds.Load(), Updates: c.updates.Load(), Deletes: c.deletes.Load()}
}

// ctrlkitHandler counts into c.
func (c *counters) ctrlkitHandler() handler.Handler[*corev1.ConfigMap] {
	return handler.Funcs[*corev1.ConfigMap]{
		AddFunc:    func(_ *corev1.ConfigMap, initial bool) { c.add(initial) },
		UpdateFunc: func(_, _ *corev1.ConfigMap) { c.updates.Add(1) },
		DeleteFunc: func(object.Deleted[*corev1.ConfigMap]) { c.deletes.Add(1) },
	}
}

// clientGoHandler counts into c.
func (c *counters) clientGoHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(_ any, initial bool) { c.add(initial) },
		UpdateFunc: func(_, _ any) { c.updates.Add(1) },
		DeleteFunc: func(any) { c.deletes.Add(1) },
	}
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
	res.Divergent, err = converge(ctx, cms, func() []*corev1.ConfigMap { return reader.List("", nil) })
	if err != nil {
		cancel()
		<-done
		return result{}, err
	}
	res.Heard, res.Cached = count.heard(), reader.Len()
	start := inf.Start()
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
	res.Divergent, err = converge(ctx, cms, func() []*corev1.ConfigMap {
		objs := inf.GetStore().List()
		out := make([]*corev1.ConfigMap, 0, len(objs))
		for _, o := range objs {
			out = append(out, o.(*corev1.ConfigMap))
		}
		return out
	})
	res.Heard, res.Cached = count.heard(), len(inf.GetStore().ListKeys())
	return res, err
}
