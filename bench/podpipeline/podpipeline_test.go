// Package podpipeline_test times the seed pipeline (informer, a key handler
// into a queue, workers reading the cache) on Pods, side by side with
// client-go's: 10,000 Pods listed, then Pod updates built fresh per event
// (as a decoder builds them, scenario.Pod's realistic objects: two
// containers, probes, volumes, a status) and sent through a watch, until
// two workers have read each key's newest version from the cache. ns/op is
// the wall time per event; cpu-ns/event the process's CPU per event,
// building the objects included on both sides, gc-cpu-ns/event the part
// of it the collector took; gcs/100k-events the
// collections the run took, and heap-goal-MiB the collector's heap goal at
// its end (twice the live heap, most of it the cache: what the process
// grows to). The ctrlkit side interns
// each object's strings after the fact (the informer's default for objects
// that did not come through its own decoder, as a fake or a clientset's
// ListerWatcher gives them); BenchmarkPodPipelineWithoutInterning measures
// it with interning off.
package podpipeline_test

import (
	"context"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/bench/scenario"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

const (
	keys       = 10_000
	namespaces = 20
	workers    = 2
)

// podAt is Pod id at resource version rv, built fresh.
func podAt(id, rv int) *corev1.Pod {
	p := scenario.Pod(id, namespaces)
	p.ResourceVersion = strconv.Itoa(rv)
	return &p
}

// podID reads the id scenario.Pod put at the end of the name.
func podID(name string) int {
	n, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	return n
}

// source lists keys Pods and hands out one watch, fed by the benchmark.
type source struct {
	w       *watch.FakeWatcher
	watched chan struct{}
	once    sync.Once
}

func (s *source) list(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
	l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(keys)}}
	for i := range keys {
		l.Items = append(l.Items, *podAt(i, i+1))
	}
	return l, nil
}

func (s *source) watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	s.once.Do(func() { close(s.watched) })
	return s.w, nil
}

// clientGoLW lists instead of streaming (client-go v0.37 turns watch-list
// on by default), as the ctrlkit side does.
type clientGoLW struct{ *cache.ListWatch }

func (clientGoLW) IsWatchListSemanticsUnSupported() bool { return true }

// run sets up side's pipeline over a fresh source, lets it sync, then
// times b.N update events through it.
func run(b *testing.B, side string, intern bool) {
	src := &source{w: watch.NewFakeWithChanSize(0, false), watched: make(chan struct{})}
	seen := make([]atomic.Int64, keys)
	want := make([]int64, keys)
	for i := range want {
		want[i] = int64(i + 1)
	}
	record := func(p *corev1.Pod) {
		rv, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
		seen[podID(p.Name)].Store(rv)
	}
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if side == "ctrlkit" {
		lw := listwatch.New[*corev1.Pod](src.list, src.watch, listwatch.Options{})
		inf, err := informer.New[*corev1.Pod](lw, informer.Options[*corev1.Pod]{Name: "pods", FactoryOptions: informer.FactoryOptions{
			Reflector: reflector.Options{DisableWatchList: true}, DetectMutations: informer.DetectNever, DisableInterning: !intern}})
		if err != nil {
			b.Fatal(err)
		}
		pods := inf.Reader()
		c, err := controller.New[string](controller.ReconcileFunc[string](func(_ context.Context, k string) (controller.Result, error) {
			if p, ok := pods.GetByKey(k); ok {
				record(p)
			}
			return controller.Result{}, nil
		}), controller.Options[string]{Workers: workers})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(handler.EnqueueKey[*corev1.Pod](c, nil), informer.HandlerOptions{}); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = inf.Run(ctx) })
		wg.Go(func() { _ = c.Run(ctx) })
	} else {
		lw := clientGoLW{&cache.ListWatch{
			ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return src.list(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return src.watch(ctx, o) },
		}}
		inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		q := cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
		enqueue := func(obj any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(k)
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue}); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
		for range workers {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					if o, ok, _ := inf.GetIndexer().GetByKey(k); ok {
						record(o.(*corev1.Pod))
					}
					q.Forget(k)
					q.Done(k)
				}
			})
		}
		defer q.ShutDown()
	}
	done := func() bool {
		for i := range want {
			if seen[i].Load() != want[i] {
				return false
			}
		}
		return true
	}
	<-src.watched
	for !done() {
		time.Sleep(time.Millisecond) // polling the harness's own record, not synchronisation of the code measured
	}
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	gcBefore := scenario.GCCPU()
	start := scenario.ProcessCPU()
	b.ResetTimer()
	for e := range b.N {
		k := (e * 7919) % keys
		want[k] = int64(keys + e + 1)
		src.w.Modify(podAt(k, keys+e+1))
	}
	for !done() {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(scenario.ProcessCPU()-start)/float64(b.N), "cpu-ns/event")
	b.ReportMetric(float64(scenario.GCCPU()-gcBefore)/float64(b.N), "gc-cpu-ns/event")
	goruntime.ReadMemStats(&after)
	b.ReportMetric(float64(after.NumGC-before.NumGC)*100_000/float64(b.N), "gcs/100k-events")
	b.ReportMetric(float64(after.NextGC)/(1<<20), "heap-goal-MiB")
}

// BenchmarkPodPipeline: the seed pipeline on Pods, ctrlkit's defaults.
func BenchmarkPodPipeline(b *testing.B) {
	b.Run("ctrlkit", func(b *testing.B) { run(b, "ctrlkit", true) })
	b.Run("client-go", func(b *testing.B) { run(b, "client-go", false) })
}

// BenchmarkPodPipelineWithoutInterning: the same, ctrlkit's informer with
// FactoryOptions.DisableInterning.
func BenchmarkPodPipelineWithoutInterning(b *testing.B) {
	b.Run("ctrlkit", func(b *testing.B) { run(b, "ctrlkit", false) })
	b.Run("client-go", func(b *testing.B) { run(b, "client-go", false) })
}
