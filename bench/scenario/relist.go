package scenario

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// RelistConfig sizes S4.
type RelistConfig struct {
	Objects, Namespaces int
	// Atomic runs ctrlkit's informer with AtomicRelist (the relist held
	// whole and swapped in at its end), as client-go does, instead of its
	// streamed default.
	Atomic bool
}

// Relist is S4: a full cache whose watch ends with 410 Gone, then the
// relist: peak heap during it over the steady heap before it.
func Relist(cfg RelistConfig) Scenario {
	name := "S4 relist"
	if cfg.Atomic {
		name = "S4 relist, ctrlkit atomic"
	}
	return Scenario{
		Name: name,
		Doc: fmt.Sprintf("%d ConfigMaps (as S1) generated page by page as the informer lists them, pages of 500, an informer "+
			"with the namespace index, each side's defaults, both listing (no watch-list), and one handler counting adds and "+
			"updates. Once synced and every add handled: steady = heap objects after runtime.GC twice. Then the watch sends an "+
			"Error event with NewResourceExpired (410) and the source serves the same objects again, freshly generated, each "+
			"at a newer resourceVersion (all changed while the watch was down: ctrlkit notifies only changed objects after "+
			"a relist, client-go every object). The relist is done when the handler has heard an update for every object. A "+
			"goroutine samples %s (no stop-the-world) every 200µs from the 410 until then: peak_mb is its maximum "+
			"(garbage not yet collected included, so GOGC shows); peak_live is the most /gc/heap/live:bytes (live heap "+
			"marked by the last GC) reached during the relist. client-go waits out its reflector's backoff (0.8-1.6 s, "+
			"jittered) before relisting; relist_ms includes it.", cfg.Objects, heapObjects),
		Metrics: []Metric{
			{Name: "steady_mb", Unit: "MB", Better: "lower"},
			{Name: "peak_mb", Unit: "MB", Better: "lower"},
			{Name: "peak_over_steady", Unit: "x", Better: "lower"},
			{Name: "peak_live_over_steady", Unit: "x", Better: "lower"},
			{Name: "relist_ms", Unit: "ms", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) { return runRelist(ctx, cfg, side) },
	}
}

// configMapSource lists n freshly generated ConfigMaps (the same ones on
// every list, each object and the list at a newer resourceVersion each
// time); watch serves watches.
func configMapSource(n, namespaces int, w func(context.Context, int) (watch.Interface, error)) *memSource[corev1.ConfigMap, *corev1.ConfigMap] {
	return &memSource[corev1.ConfigMap, *corev1.ConfigMap]{n: n,
		items: func(list, start, end int) []corev1.ConfigMap {
			out := make([]corev1.ConfigMap, end-start)
			for i := range out {
				out[i] = configMap(start+i, namespaces, rvString(n*list+start+i+1))
			}
			return out
		},
		listRV: func(list int) string { return rvString(n * (list + 1)) },
		wrap:   configMapList, watch: w,
	}
}

func runRelist(ctx context.Context, cfg RelistConfig, side string) (Result, error) {
	first := make(chan watch.Event, 1)
	src := configMapSource(cfg.Objects, cfg.Namespaces, func(_ context.Context, n int) (watch.Interface, error) {
		if n == 0 {
			return watch.NewProxyWatcher(first), nil
		}
		return idleWatch(), nil
	})
	var adds, updates atomic.Int64
	c, err := startCache(ctx, side, src, cacheOptions{onAdd: func() { adds.Add(1) }, onUpdate: func() { updates.Add(1) },
		atomic: cfg.Atomic})
	if err != nil {
		return nil, err
	}
	res, err := measureRelist(ctx, cfg, c, first, &adds, &updates, src.listRV(1))
	if serr := c.stop(); err == nil {
		err = serr
	}
	if err == nil {
		err = verifyRelist(c, cfg, src)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func measureRelist(ctx context.Context, cfg RelistConfig, c cacheSide[*corev1.ConfigMap], first chan<- watch.Event, adds, updates *atomic.Int64, rv string) (Result, error) {
	n := int64(cfg.Objects)
	if err := poll(ctx, 5*time.Minute, time.Millisecond, "initial list handled", func() bool { return c.synced() && adds.Load() == n }); err != nil {
		return nil, err
	}
	steady := liveHeap()
	peak := startPeakSampler()
	t0 := time.Now()
	gone := apierrors.NewResourceExpired("too old resource version: 1 (100001)")
	first <- watch.Event{Type: watch.Error, Object: &gone.ErrStatus}
	// Done when every update was heard and the relist's end was taken in
	// (a streamed relist's last page can be handled before its end is).
	err := poll(ctx, 5*time.Minute, time.Millisecond, "relist handled", func() bool {
		return updates.Load() == n && c.resourceVersion() == rv
	})
	d := time.Since(t0)
	heap, live := peak.stop()
	if err != nil {
		return nil, fmt.Errorf("%w (%d updates of %d, %d adds)", err, updates.Load(), n, adds.Load())
	}
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	return Result{
		"steady_mb":             mb(steady),
		"peak_mb":               mb(heap),
		"peak_over_steady":      float64(heap) / float64(steady),
		"peak_live_over_steady": float64(live) / float64(steady),
		"relist_ms":             ms(d),
	}, nil
}

// verifyRelist checks that the side listed twice, never by watch-list,
// holds every object and reflects the second list's resource version.
func verifyRelist(c cacheSide[*corev1.ConfigMap], cfg RelistConfig, src *memSource[corev1.ConfigMap, *corev1.ConfigMap]) error {
	if err := src.checkPaths(2); err != nil {
		return err
	}
	if rv, want := c.resourceVersion(), src.listRV(1); rv != want {
		return fmt.Errorf("cache at resource version %s after the relist, want %s", rv, want)
	}
	if n := c.len(); n != cfg.Objects {
		return fmt.Errorf("cache holds %d objects, want %d", n, cfg.Objects)
	}
	for i := range cfg.Objects {
		want := configMap(i, cfg.Namespaces, rvString(cfg.Objects+i+1)) // as the second list served it
		got, ok := c.get(want.Namespace + "/" + want.Name)
		if !ok || got.ResourceVersion != want.ResourceVersion {
			return fmt.Errorf("cache lacks %s/%s at version %s", want.Namespace, want.Name, want.ResourceVersion)
		}
	}
	return nil
}

// peakSampler records the highest heap figures seen by its goroutine.
type peakSampler struct {
	quit       chan struct{}
	wg         sync.WaitGroup
	heap, live uint64 // written by the goroutine, read after wg.Wait
}

func startPeakSampler() *peakSampler {
	p := &peakSampler{quit: make(chan struct{})}
	p.wg.Go(func() {
		s := []metrics.Sample{{Name: heapObjects}, {Name: "/gc/heap/live:bytes"}}
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			p.heap, p.live = max(p.heap, s[0].Value.Uint64()), max(p.live, s[1].Value.Uint64())
			select {
			case <-p.quit:
				return
			case <-t.C:
			}
		}
	})
	return p
}

// stop ends sampling and returns the peaks.
func (p *peakSampler) stop() (heap, live uint64) {
	close(p.quit)
	p.wg.Wait()
	return p.heap, p.live
}
