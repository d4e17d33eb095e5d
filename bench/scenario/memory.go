package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// MemoryConfig sizes S2.
type MemoryConfig struct {
	Objects, Namespaces int
}

// Memory is S2: the live heap an informer's cache of Pods costs per object,
// with each library's defaults and with managedFields stripped on both.
func Memory(cfg MemoryConfig) Scenario {
	return Scenario{
		Name: "S2 memory",
		Doc: fmt.Sprintf("%d Pods over %d namespaces (~%d B as JSON each: 2 containers with env, ports, probe, resources, "+
			"mounts; 3 volumes; 4 conditions, 2 container statuses; a managedFields entry; what repeats repeats as in a cluster: "+
			"50 ReplicaSets owning them, 200 nodes, images in 20 versions per app with one digest per image, the same env, "+
			"tolerations and volumes; every string newly allocated), generated page by page as the "+
			"informer lists them (the source keeps nothing), listed in pages of 500. An informer with the namespace index "+
			"and no handler. Per object: (HeapAlloc after sync - HeapAlloc before start) / N, each after runtime.GC twice "+
			"(HeapAlloc: bytes of live objects, without free span space). defaults: ctrlkit strips managedFields and interns "+
			"repeated strings (package intern), client-go keeps managedFields; stripped: client-go gets SetTransform(strip managedFields), ctrlkit its default. floor: the same Pods "+
			"held in their pages without managedFields and without any informer (the same for both sides: what no cache "+
			"that keeps whole objects, each with its own strings, can go below; ctrlkit's interning goes below it).",
			cfg.Objects, cfg.Namespaces, podJSONSize()),
		Metrics: []Metric{
			{Name: "bytes_per_object_defaults", Unit: "B", Better: "lower"},
			{Name: "bytes_per_object_stripped", Unit: "B", Better: "lower"},
			{Name: "floor_bytes_per_object_stripped", Unit: "B", Better: "lower"},
		},
		Run: func(ctx context.Context, side string) (Result, error) {
			res := Result{"floor_bytes_per_object_stripped": podFloorBytes(cfg)}
			for _, strip := range []bool{false, true} {
				b, err := cachedPodBytes(ctx, cfg, side, strip)
				if err != nil {
					return nil, err
				}
				if strip {
					res["bytes_per_object_stripped"] = b
				} else {
					res["bytes_per_object_defaults"] = b
				}
			}
			return res, nil
		},
	}
}

func podJSONSize() int {
	b, _ := json.Marshal(pod(12345, 100, "12346"))
	return len(b)
}

// podSource lists n freshly generated Pods and never sends a watch event.
func podSource(n, namespaces int) *memSource[corev1.Pod, *corev1.Pod] {
	return &memSource[corev1.Pod, *corev1.Pod]{n: n,
		items: func(_, start, end int) []corev1.Pod {
			out := make([]corev1.Pod, end-start)
			for i := range out {
				out[i] = pod(start+i, namespaces, rvString(start+i+1))
			}
			return out
		},
		listRV: func(list int) string { return rvString(n * (list + 1)) },
		wrap: func(items []corev1.Pod, rv, cont string, remaining *int64) kruntime.Object {
			l := &corev1.PodList{Items: items}
			l.ResourceVersion, l.Continue, l.RemainingItemCount = rv, cont, remaining
			return l
		},
		watch: func(context.Context, int) (watch.Interface, error) { return idleWatch(), nil },
	}
}

func cachedPodBytes(ctx context.Context, cfg MemoryConfig, side string, strip bool) (float64, error) {
	src := podSource(cfg.Objects, cfg.Namespaces)
	before := liveHeap()
	c, err := startCache(ctx, side, src, cacheOptions{stripClientGo: strip})
	if err != nil {
		return 0, err
	}
	err = poll(ctx, 5*time.Minute, time.Millisecond, "informer synced", c.synced)
	after := liveHeap()
	if err == nil {
		keepManaged := side == ClientGo && !strip
		err = verifyPods(c, cfg, keepManaged)
	}
	if serr := c.stop(); err == nil {
		err = serr
	}
	if err == nil {
		err = src.checkPaths(1)
	}
	if err != nil {
		return 0, fmt.Errorf("strip=%v: %w", strip, err)
	}
	return (float64(after) - float64(before)) / float64(cfg.Objects), nil
}

// verifyPods checks that the cache holds every Pod of the source, at its
// version, with managedFields kept or stripped as configured.
func verifyPods(c cacheSide[*corev1.Pod], cfg MemoryConfig, keepManaged bool) error {
	if n := c.len(); n != cfg.Objects {
		return fmt.Errorf("cache holds %d pods, want %d", n, cfg.Objects)
	}
	for i := range cfg.Objects {
		want := pod(i, cfg.Namespaces, rvString(i+1))
		got, ok := c.get(want.Namespace + "/" + want.Name)
		switch {
		case !ok:
			return fmt.Errorf("cache lacks pod %s/%s", want.Namespace, want.Name)
		case got.ResourceVersion != want.ResourceVersion || got.Spec.NodeName != want.Spec.NodeName:
			return fmt.Errorf("cache holds pod %s/%s at version %s, want %s", got.Namespace, got.Name, got.ResourceVersion, want.ResourceVersion)
		case keepManaged != (len(got.ManagedFields) > 0):
			return fmt.Errorf("pod %s/%s has %d managedFields entries; keep=%v", got.Namespace, got.Name, len(got.ManagedFields), keepManaged)
		}
	}
	return nil
}

// podFloorBytes is the live heap per Pod of the objects alone: the source's
// pages held in a slice, managedFields stripped, no informer.
func podFloorBytes(cfg MemoryConfig) float64 {
	src := podSource(cfg.Objects, cfg.Namespaces)
	before := liveHeap()
	var pages [][]corev1.Pod
	for start := 0; start < cfg.Objects; start += 500 {
		page := src.items(0, start, min(start+500, cfg.Objects))
		for i := range page {
			page[i].ManagedFields = nil
		}
		pages = append(pages, page)
	}
	after := liveHeap()
	runtime.KeepAlive(pages)
	return (float64(after) - float64(before)) / float64(cfg.Objects)
}
