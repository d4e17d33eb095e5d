package main

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// collector stands in for Kubernetes' garbage collector, which the
// embedded server does not run, for the mirror's Secrets, and as it does,
// from watches: when it sees a labelled ConfigMap deleted it deletes the
// Secret of that name, and when it sees a Secret controlled by a
// ConfigMap it saw deleted (an operator wrote it from a stale cache) it
// deletes that Secret. The operators see these deletes as they would the
// collector's.
type collector struct {
	kube kubernetes.Interface
	// cmRV and secretRV are where the watches start.
	cmRV, secretRV string
	// gone holds the UIDs of the ConfigMaps seen deleted. Owned by run.
	gone map[types.UID]bool
	// Deleted counts the Secrets deleted after their ConfigMap, Orphans
	// those written after it was deleted. Read them after run returned.
	Deleted, Orphans int
}

// newCollector lists the mirror's objects to learn where to watch from;
// it starts nothing: events from now on reach run.
func newCollector(ctx context.Context, kube kubernetes.Interface) (*collector, error) {
	c := &collector{kube: kube, gone: map[types.UID]bool{}}
	cms, err := kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: selectMirror, Limit: 1})
	if err != nil {
		return nil, err
	}
	secrets, err := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: selectMirrored, Limit: 1})
	if err != nil {
		return nil, err
	}
	c.cmRV, c.secretRV = cms.ResourceVersion, secrets.ResourceVersion
	return c, nil
}

// run collects until ctx ends, then returns nil, or returns the first
// failure.
func (c *collector) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmw, err := c.watch(ctx, c.cmRV, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selectMirror
		return c.kube.CoreV1().ConfigMaps("").Watch(ctx, o)
	})
	if err != nil {
		return err
	}
	defer func() { cancel(); <-cmw.Done() }()
	sw, err := c.watch(ctx, c.secretRV, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selectMirrored
		return c.kube.CoreV1().Secrets("").Watch(ctx, o)
	})
	if err != nil {
		return err
	}
	defer func() { cancel(); <-sw.Done() }()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-cmw.ResultChan():
		case ev, ok = <-sw.ResultChan():
		}
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return errors.New("collector: a watch ended")
		}
		if err := c.handle(ctx, ev); err != nil && ctx.Err() == nil {
			return fmt.Errorf("collector: %w", err)
		}
	}
}

// watch starts a watch that resumes from the last event it saw when the
// server ends it.
func (c *collector) watch(ctx context.Context, rv string, f func(context.Context, metav1.ListOptions) (watch.Interface, error)) (*watchtools.RetryWatcher, error) {
	return watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: f})
}

// handle collects after one event.
func (c *collector) handle(ctx context.Context, ev watch.Event) error {
	switch o := ev.Object.(type) {
	case *metav1.Status:
		return fmt.Errorf("watch error: %s", o.Message)
	case *corev1.ConfigMap:
		if ev.Type != watch.Deleted {
			return nil
		}
		c.gone[o.UID] = true
		err := c.kube.CoreV1().Secrets(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		if err == nil {
			c.Deleted++
		}
		return ignoreGone(err)
	case *corev1.Secret:
		owner := metav1.GetControllerOf(o)
		if ev.Type == watch.Deleted || owner == nil || !c.gone[owner.UID] {
			return nil
		}
		err := c.kube.CoreV1().Secrets(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
		if err == nil {
			c.Orphans++
		}
		return ignoreGone(err)
	}
	return nil
}

// ignoreGone drops the errors of deleting what is already gone.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
