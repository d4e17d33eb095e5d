package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Floor is a side of S1 that is no pipeline at all: one goroutine lists
// and watches, keeps every object in a map by key and hands it straight to
// the run's reader, where the other sides hand each key to a worker that
// reads the cache. It has no FIFO, no queue, no handler, no index and no
// cache read, and strips nothing: what any cache of these objects pays, the
// collector's marking of that cache under the source's allocations
// included. An extra side of S1 on built objects.
const Floor = "floor"

type floorPipeline struct {
	mu     sync.Mutex
	objs   map[string]*corev1.ConfigMap
	isSync atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func startFloorPipeline(ctx context.Context, lw cache.ListerWatcherWithContext, observe func(string, *corev1.ConfigMap, bool), pageSize int) *floorPipeline {
	ctx, cancel := context.WithCancel(ctx)
	p := &floorPipeline{objs: make(map[string]*corev1.ConfigMap), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = p.run(ctx, lw, observe, pageSize)
	}()
	return p
}

func (p *floorPipeline) run(ctx context.Context, lw cache.ListerWatcherWithContext, observe func(string, *corev1.ConfigMap, bool), pageSize int) error {
	opts := metav1.ListOptions{Limit: int64(pageSize)}
	var rv string
	for {
		obj, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			return err
		}
		l, ok := obj.(*corev1.ConfigMapList)
		if !ok {
			return fmt.Errorf("listed a %T", obj)
		}
		for i := range l.Items {
			p.put(&l.Items[i], observe)
		}
		if rv, opts.Continue = l.ResourceVersion, l.Continue; opts.Continue == "" {
			break
		}
	}
	p.isSync.Store(true)
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			cm, ok := e.Object.(*corev1.ConfigMap)
			if !ok {
				return fmt.Errorf("watched a %T", e.Object)
			}
			if e.Type == watch.Deleted {
				key := cm.Namespace + "/" + cm.Name
				p.mu.Lock()
				delete(p.objs, key)
				p.mu.Unlock()
				observe(key, nil, false)
				continue
			}
			p.put(cm, observe)
		}
	}
}

func (p *floorPipeline) put(cm *corev1.ConfigMap, observe func(string, *corev1.ConfigMap, bool)) {
	key := cm.Namespace + "/" + cm.Name
	p.mu.Lock()
	p.objs[key] = cm
	p.mu.Unlock()
	observe(key, cm, true)
}

func (p *floorPipeline) synced() bool { return p.isSync.Load() }
func (p *floorPipeline) get(key string) (*corev1.ConfigMap, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cm, ok := p.objs[key]
	return cm, ok
}
func (p *floorPipeline) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.objs)
}

// stop cancels the run and waits for it; a list or watch cut short by
// that cancellation is no error.
func (p *floorPipeline) stop() error {
	p.cancel()
	<-p.done
	if errors.Is(p.err, context.Canceled) {
		return nil
	}
	return p.err
}
