package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// convergeWithin bounds how long a cache may take to catch up with a LIST
// made just after it synced.
const convergeWithin = 10 * time.Second

// cacheView returns a cache's objects.
type cacheView func() []*corev1.ConfigMap

// converge compares a cache with a fresh LIST by name and resource version
// and returns the keys on which they still disagree after the cache had up
// to convergeWithin to catch up. Objects may change meanwhile (the chaos
// writer runs): a cached object may be newer than the listed one, and one
// listed but since deleted (the server answers NotFound) may be missing.
func converge(ctx context.Context, cms typedcorev1.ConfigMapInterface, view cacheView) ([]string, error) {
	listed, listRV, err := listAll(ctx, cms)
	if err != nil {
		return nil, fmt.Errorf("convergence LIST: %w", err)
	}
	gone := map[string]bool{} // listed, since deleted
	deadline := time.Now().Add(convergeWithin)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		objs := view()
		bad, missing := divergence(listed, listRV, objs, gone)
		if len(bad) == 0 || time.Now().After(deadline) {
			return bad, nil
		}
		if err := markGone(ctx, cms, missing, gone); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// listAll lists every ConfigMap, 500 a page, as name -> resource version,
// with the list's resource version.
func listAll(ctx context.Context, cms typedcorev1.ConfigMapInterface) (map[string]uint64, uint64, error) {
	out := map[string]uint64{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := cms.List(ctx, opts)
		if err != nil {
			return nil, 0, err
		}
		for k := range l.Items {
			out[l.Items[k].Name] = rv(l.Items[k].ResourceVersion)
		}
		if l.Continue == "" {
			return out, rv(l.ResourceVersion), nil
		}
		opts.Continue = l.Continue
	}
}

// divergence returns the keys on which the cache disagrees with the
// listing at listRV, sorted, and those of them missing from the cache: a
// cached object older than listed, one listed but missing (unless known
// gone since), one cached but not listed though not newer than the list.
func divergence(listed map[string]uint64, listRV uint64, objs []*corev1.ConfigMap, gone map[string]bool) (bad, missing []string) {
	cached := make(map[string]uint64, len(objs))
	for _, o := range objs {
		cached[o.Name] = rv(o.ResourceVersion)
	}
	for name, l := range listed {
		c, ok := cached[name]
		switch {
		case !ok && !gone[name]:
			bad, missing = append(bad, name), append(missing, name)
		case ok && c < l:
			bad = append(bad, name)
		}
	}
	for name, c := range cached {
		if _, ok := listed[name]; !ok && c <= listRV {
			bad = append(bad, name)
		}
	}
	sort.Strings(bad)
	return bad, missing
}

// markGone asks the server for each of names not yet asked about and
// records in gone those it no longer has.
func markGone(ctx context.Context, cms typedcorev1.ConfigMapInterface, names []string, gone map[string]bool) error {
	for _, name := range names {
		if _, asked := gone[name]; asked {
			continue
		}
		_, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone[name] = true
		case err != nil:
			return err
		default:
			gone[name] = false
		}
	}
	return nil
}

// rv parses a resource version; the embedded server's are etcd revisions.
// An unparsable one is 0.
func rv(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}
