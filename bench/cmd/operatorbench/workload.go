package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Labels of the mirror operator: it mirrors ConfigMaps with selectMirror
// into Secrets with selectMirrored.
const (
	selectMirror   = "mirror=true"
	selectMirrored = "mirrored=true"
)

// writers is the number of concurrent writers of the workload.
const writers = 8

// change is one step of the paced phase: an update or a delete of an object.
type change struct {
	obj    int
	delete bool
}

// plan is a run's workload: objects created, then changes made at the rate.
// Every side of a round runs the same plan. Deleted objects are never
// updated, so no write fails for an object gone meanwhile.
type plan struct {
	objects int
	changes []change
}

// newPlan makes the plan of cfg with seed: a fifth of the objects deleted,
// the deletes spread evenly among the updates, each update of a random
// surviving object.
func newPlan(cfg config, seed uint64) plan {
	rnd := rand.New(rand.NewPCG(seed, 0x6f70))
	perm := rnd.Perm(cfg.Objects)
	deleted, kept := perm[:cfg.deletes()], perm[cfg.deletes():]
	total := cfg.Updates + len(deleted)
	p := plan{objects: cfg.Objects, changes: make([]change, 0, total)}
	next := 0 // the next object of deleted
	for i := range total {
		if (i+1)*len(deleted)/total > i*len(deleted)/total {
			p.changes = append(p.changes, change{obj: deleted[next], delete: true})
			next++
		} else {
			p.changes = append(p.changes, change{obj: kept[rnd.IntN(len(kept))]})
		}
	}
	return p
}

// workload writes one run's objects into its namespaces.
type workload struct {
	kube kubernetes.Interface
	nss  []string

	// mu guards written: the newest version of each live ConfigMap
	// written, by the resource versions the server answered with.
	mu      sync.Mutex
	written map[types.NamespacedName]*corev1.ConfigMap
}

func newWorkload(kube kubernetes.Interface, nss []string) *workload {
	return &workload{kube: kube, nss: nss, written: map[types.NamespacedName]*corev1.ConfigMap{}}
}

// wrote records cm, as the server answered a write, unless a newer
// version was recorded already (the writers run concurrently). The
// embedded server's resource versions are etcd revisions.
func (w *workload) wrote(cm *corev1.ConfigMap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}
	if old, ok := w.written[key]; !ok || revision(old.ResourceVersion) < revision(cm.ResourceVersion) {
		w.written[key] = cm
	}
}

// expected returns the live ConfigMaps written, newest versions.
func (w *workload) expected() map[types.NamespacedName]*corev1.ConfigMap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.written)
}

// revision parses a resource version; 0 if it is not a number.
func revision(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// object returns the namespace and name of object i.
func (w *workload) object(i int) (ns, name string) {
	return w.nss[i%len(w.nss)], fmt.Sprintf("cm-%05d", i)
}

// createNamespaces creates the run's namespaces, named prefix-NN.
func createNamespaces(ctx context.Context, kube kubernetes.Interface, prefix string, n int) ([]string, error) {
	nss := make([]string, n)
	for i := range nss {
		nss[i] = fmt.Sprintf("%s-%02d", prefix, i)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nss[i]}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return nss, nil
}

// configMap is a labelled ConfigMap of the workload.
func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"mirror": "true"}},
		Data:       map[string]string{"payload": strings.Repeat("p", 200), "rev": "0"},
	}
}

// createOne creates a labelled ConfigMap and records it.
func (w *workload) createOne(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	cm, err := w.kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, name), metav1.CreateOptions{})
	if err == nil {
		w.wrote(cm)
	}
	return cm, err
}

// create creates the plan's objects, writers at a time.
func (w *workload) create(ctx context.Context, p plan) error {
	err := inParallel(p.objects, func(i int) error {
		ns, name := w.object(i)
		_, err := w.createOne(ctx, ns, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	return nil
}

// inParallel calls f(0) to f(n-1) on writers goroutines and returns the
// first error.
func inParallel(n int, f func(i int) error) error {
	next := make(chan int)
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// changeAll makes the plan's changes at rate per second: one dispatcher
// paces them to writers workers. If the writers fall behind, the rate
// drops; the run reports the duration.
func (w *workload) changeAll(ctx context.Context, p plan, rate int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ops := make(chan change)
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for c := range ops {
				if err := w.apply(ctx, c); err != nil && first.CompareAndSwap(nil, &err) {
					cancel()
				}
			}
		})
	}
	period := time.Second / time.Duration(rate)
	start := time.Now()
dispatch:
	for i, c := range p.changes {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			select { // pacing, not synchronisation
			case <-ctx.Done():
				break dispatch
			case <-time.After(d):
			}
		}
		select {
		case ops <- c:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(ops)
	wg.Wait()
	if err := first.Load(); err != nil {
		return fmt.Errorf("change: %w", *err)
	}
	return ctx.Err()
}

// apply makes one change.
func (w *workload) apply(ctx context.Context, c change) error {
	ns, name := w.object(c.obj)
	cms := w.kube.CoreV1().ConfigMaps(ns)
	if c.delete {
		err := cms.Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil {
			w.mu.Lock()
			delete(w.written, types.NamespacedName{Namespace: ns, Name: name})
			w.mu.Unlock()
		}
		return err
	}
	patch := fmt.Appendf(nil, `{"data":{"rev":"%d"}}`, rand.Int64())
	cm, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		w.wrote(cm)
	}
	return err
}

// cleanUp deletes the run's ConfigMaps and Secrets once its operator
// stopped, so the next run's operator, watching every namespace, sees
// only its own. The namespaces stay (nothing finalizes a namespace here).
func (w *workload) cleanUp(ctx context.Context) error {
	return inParallel(len(w.nss), func(i int) error {
		cms, secrets := w.kube.CoreV1().ConfigMaps(w.nss[i]), w.kube.CoreV1().Secrets(w.nss[i])
		if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selectMirror}); err != nil {
			return err
		}
		return secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selectMirrored})
	})
}
