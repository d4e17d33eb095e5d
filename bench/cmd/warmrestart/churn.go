package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// churn is what applyChurn changed.
type churn struct {
	Updated, Deleted, Created int
}

// Total is the number of objects changed.
func (c churn) Total() int { return c.Updated + c.Deleted + c.Created }

// applyChurn changes the ConfigMaps while no informer runs: it updates 1%
// of them, deletes 0.1% and creates 0.1% (at least one of each), with 8
// concurrent writers. tag makes the new names unique.
func applyChurn(ctx context.Context, cms typedcorev1.ConfigMapInterface, objects int, tag string) (churn, error) {
	listed, _, err := listAll(ctx, cms)
	if err != nil {
		return churn{}, err
	}
	names := slices.Sorted(maps.Keys(listed))
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	c := churn{Updated: max(1, objects/100), Deleted: max(1, objects/1000), Created: max(1, objects/1000)}
	if c.Updated+c.Deleted > len(names) {
		return churn{}, fmt.Errorf("churn: %d objects listed, too few", len(names))
	}
	upd, del := names[:c.Updated], names[c.Updated:c.Updated+c.Deleted]
	ops := make([]func() error, 0, c.Total())
	for _, n := range upd {
		ops = append(ops, func() error { return touch(ctx, cms, n, tag) })
	}
	for _, n := range del {
		ops = append(ops, func() error { return cms.Delete(ctx, n, metav1.DeleteOptions{}) })
	}
	for i := range c.Created {
		ops = append(ops, func() error { return create(ctx, cms, fmt.Sprintf("new-%s-%06d", tag, i)) })
	}
	return c, parallel(8, ops)
}

// touch changes one ConfigMap's data with a merge patch.
func touch(ctx context.Context, cms typedcorev1.ConfigMapInterface, name, value string) error {
	patch := fmt.Appendf(nil, `{"data":{"rev":%q}}`, value)
	_, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// create creates a ConfigMap like those scenario.Populate makes.
func create(ctx context.Context, cms typedcorev1.ConfigMapInterface, name string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"data": strings.Repeat("x", 500)}}
	_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	return err
}

// parallel runs ops on n goroutines and returns the first error.
func parallel(n int, ops []func() error) error {
	var first atomic.Pointer[error]
	next := make(chan func() error)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for op := range next {
				if err := op(); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for _, op := range ops {
		next <- op
	}
	close(next)
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// writer changes ConfigMaps at a steady rate: mostly updates of existing
// ones, and every tenth change a create or a delete of its own objects.
type writer struct {
	cms             typedcorev1.ConfigMapInterface
	names           []string
	rate            int
	changes, errors atomic.Int64
}

func newWriter(cms typedcorev1.ConfigMapInterface, listed map[string]uint64, rate int) *writer {
	return &writer{cms: cms, names: slices.Sorted(maps.Keys(listed)), rate: rate}
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) {
	t := time.NewTicker(time.Second / time.Duration(w.rate))
	defer t.Stop()
	var own []string // created by the writer, not yet deleted
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		switch {
		case i%10 == 0:
			name := fmt.Sprintf("chaos-%06d", i)
			if err = create(ctx, w.cms, name); err == nil {
				own = append(own, name)
			}
		case i%10 == 5 && len(own) > 0:
			err, own = w.cms.Delete(ctx, own[0], metav1.DeleteOptions{}), own[1:]
		default:
			err = touch(ctx, w.cms, w.names[rand.IntN(len(w.names))], fmt.Sprint("chaos-", i))
		}
		w.count(ctx, err)
	}
}

// count records one change or, unless ctx ended, one failure.
func (w *writer) count(ctx context.Context, err error) {
	switch {
	case err == nil:
		w.changes.Add(1)
	case ctx.Err() == nil:
		w.errors.Add(1)
	}
}
