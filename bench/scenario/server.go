package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// ServerConfig is S5's input: a real API server with Objects ConfigMaps in
// Namespace (see Populate).
type ServerConfig struct {
	Kube      kubernetes.Interface
	Namespace string
	Objects   int
}

// Server is S5: time from start to a synced cache of every object on the
// real API server, for each library's defaults, against a bare paginated
// LIST with decoding measured in the same run (the floor).
func Server(cfg ServerConfig) Scenario {
	return Scenario{
		Name: "S5 real server",
		Doc: fmt.Sprintf("%d ConfigMaps (~500 B of data each) in the embedded kube-apiserver. ctrlkit: informer.New with "+
			"defaults (watch-list, falling back to paginated LIST); client-go: NewSharedIndexInformer with its defaults. "+
			"Both are timed to the same event: HasSynced polled every millisecond (not cache.WaitForCacheSync, which polls "+
			"every 100 ms). "+
			"bare_list_ms is a paginated LIST (500 a page) with decoding, run just before each sync. lists counts LIST "+
			"requests made by the sync (0 means it streamed the initial state by watch-list).", cfg.Objects),
		Metrics: []Metric{
			{Name: "sync_ms", Unit: "ms", Better: "lower"},
			{Name: "bare_list_ms", Unit: "ms", Better: "lower"},
			{Name: "sync_over_bare_list", Unit: "x", Better: "lower"},
			{Name: "lists", Unit: "requests", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) {
			cms := cfg.Kube.CoreV1().ConfigMaps(cfg.Namespace)
			bare, err := bareList(ctx, cms, cfg.Objects)
			if err != nil {
				return nil, err
			}
			syncFn := syncCtrlkit
			if side == ClientGo {
				syncFn = syncClientGo
			}
			d, lists, err := syncFn(ctx, cms, cfg.Objects)
			if err != nil {
				return nil, err
			}
			return Result{"sync_ms": ms(d), "bare_list_ms": ms(bare), "sync_over_bare_list": ms(d) / ms(bare), "lists": float64(lists)}, nil
		},
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Populate creates n ConfigMaps in ns with 8 concurrent writers.
func Populate(ctx context.Context, kube kubernetes.Interface, ns string, n int) error {
	cms := kube.CoreV1().ConfigMaps(ns)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%06d", i), Labels: map[string]string{"app": fmt.Sprint("app-", i%10)}},
					Data: map[string]string{"data": strings.Repeat("x", 500)}}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

func bareList(ctx context.Context, cms typedcorev1.ConfigMapInterface, want int) (time.Duration, error) {
	start := time.Now()
	n, opts := 0, metav1.ListOptions{Limit: 500}
	for {
		l, err := cms.List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += len(l.Items)
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	if n != want {
		return 0, fmt.Errorf("bare LIST returned %d objects, want %d", n, want)
	}
	return time.Since(start), nil
}

type countingLW struct {
	reflector.ListerWatcher[*corev1.ConfigMap]
	lists atomic.Int32
}

func (c *countingLW) List(ctx context.Context, o metav1.ListOptions) (reflector.List[*corev1.ConfigMap], error) {
	c.lists.Add(1)
	return c.ListerWatcher.List(ctx, o)
}

func syncCtrlkit(ctx context.Context, cms typedcorev1.ConfigMapInterface, want int) (time.Duration, int, error) {
	lw := &countingLW{ListerWatcher: listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})}
	inf, err := informer.New[*corev1.ConfigMap](lw, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{DetectMutations: informer.DetectNever}})
	if err != nil {
		return 0, 0, err
	}
	keepNamespaceIndex(inf.Reader())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	defer wg.Wait()
	if err := poll(ctx, 5*time.Minute, time.Millisecond, "ctrlkit synced", inf.HasSynced); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	defer cancel()
	if n := inf.Reader().Len(); n != want {
		return 0, 0, fmt.Errorf("ctrlkit cache holds %d objects, want %d", n, want)
	}
	return d, int(lw.lists.Load()), nil
}

func syncClientGo(ctx context.Context, cms typedcorev1.ConfigMapInterface, want int) (time.Duration, int, error) {
	var lists atomic.Int32
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cms.Watch(ctx, o) },
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	defer wg.Wait()
	// Polled as ctrlkit's is: cache.WaitForCacheSync would check only every 100ms.
	if err := poll(ctx, 5*time.Minute, time.Millisecond, "client-go synced", inf.HasSynced); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	defer cancel()
	if n := len(inf.GetStore().ListKeys()); n != want {
		return 0, 0, fmt.Errorf("client-go cache holds %d objects, want %d", n, want)
	}
	return d, int(lists.Load()), nil
}
