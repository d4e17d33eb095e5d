package listwatch

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Shard is one part of a resource's objects, e.g. one replica's share of a
// ring (package shard's Selector and ByController implement it).
type Shard interface {
	// ServerSelector is sent to the API server as ListOptions.ShardSelector,
	// which servers with the ShardedListAndWatch feature apply; "" sends
	// nothing (the adapter filters alone).
	ServerSelector() string
	// Contains reports whether obj is in the shard.
	Contains(obj metav1.Object) bool
}

// Options apply to every List and Watch call of an adapter.
type Options struct {
	// LabelSelector restricts objects by label, e.g. "app=web,tier!=db".
	// Default: everything.
	LabelSelector string
	// FieldSelector restricts objects by field, e.g. "spec.nodeName=n1".
	// Default: everything.
	FieldSelector string
	// Shard, when set, returns the shard in force; a nil result selects
	// everything. It is called at every List and Watch and for every watch
	// event, so what it returns may change while the adapter is in use (a
	// replica whose share changed); after a change, make the informer list
	// again (SharedIndexInformer.Relist). The adapter sends the shard's
	// ServerSelector and also filters every list item and watch event
	// itself, so the result is the same on a server without the feature;
	// only the bytes received differ. A watch opened while Shard returns nil
	// is not filtered. Default: everything.
	Shard func() Shard
	// OnShardNotApplied, when set, is called for each list page that the
	// server sent unfiltered (no metadata.shardInfo in the answer, or it
	// refused the field, after which the adapter stops sending it) and for
	// each watch whose events show it unfiltered (an object outside the
	// shard it was opened with), with the reason; the adapter filtered
	// them itself.
	OnShardNotApplied func(reason string)
}

// shard returns the shard in force, or nil.
func (o *Options) shard() Shard {
	if o.Shard == nil {
		return nil
	}
	return o.Shard()
}

// contains reports whether obj is in sh; objects without metadata are kept.
func contains(sh Shard, obj any) bool {
	mo, ok := obj.(metav1.Object)
	return !ok || sh.Contains(mo)
}

// apply returns opts with the adapter's selectors, and sh's server selector
// when send.
func (o *Options) apply(opts metav1.ListOptions, sh Shard, send bool) metav1.ListOptions {
	if sh != nil && send {
		opts.ShardSelector = sh.ServerSelector()
	}
	if o.LabelSelector != "" {
		opts.LabelSelector = o.LabelSelector
	}
	if o.FieldSelector != "" {
		opts.FieldSelector = o.FieldSelector
	}
	return opts
}

// ListFunc and WatchFunc are the shapes of a typed client's methods, e.g.
// clientset.CoreV1().Pods(namespace).List and .Watch.
type (
	ListFunc[L runtime.Object] func(context.Context, metav1.ListOptions) (L, error)
	WatchFunc                  func(context.Context, metav1.ListOptions) (watch.Interface, error)
)

// New adapts a typed client, for example
//
//	pods := clientset.CoreV1().Pods(namespace)
//	lw := listwatch.New[*corev1.Pod](pods.List, pods.Watch, listwatch.Options{})
func New[T object.Object, L runtime.Object](list ListFunc[L], watch WatchFunc, opts Options) reflector.ListerWatcher[T] {
	return &typed[T, L]{list: list, watch: watch, opts: opts}
}

type typed[T object.Object, L runtime.Object] struct {
	list  ListFunc[L]
	watch WatchFunc
	opts  Options
	// refused is set once the server answered an error naming the
	// shardSelector field: it is not sent again.
	refused atomic.Bool
}

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (reflector.List[T], error) {
	sh := c.opts.shard()
	send := sh != nil && sh.ServerSelector() != "" && !c.refused.Load()
	l, err := c.list(ctx, c.opts.apply(opts, sh, send))
	if err != nil && send && refusesShards(err) {
		c.refused.Store(true)
		c.notApplied(fmt.Sprintf("the server refused the shard selector: %v", err))
		send = false
		l, err = c.list(ctx, c.opts.apply(opts, sh, false))
	}
	if err != nil {
		return reflector.List[T]{}, err
	}
	out, err := fromListObject[T](l)
	if err != nil || sh == nil {
		return out, err
	}
	if send && shardInfoOf(l) == nil {
		c.notApplied("the server sent the list without metadata.shardInfo (is the ShardedListAndWatch feature gate off?)")
	}
	out.RemainingItemCount = nil // the server's count is not of this shard's objects
	kept := out.Items[:0]
	for _, it := range out.Items {
		if contains(sh, it) {
			kept = append(kept, it)
		}
	}
	clear(out.Items[len(kept):])
	out.Items = kept
	return out, nil
}

func (c *typed[T, L]) notApplied(reason string) {
	if c.opts.OnShardNotApplied != nil {
		c.opts.OnShardNotApplied(reason)
	}
}

// refusesShards reports an error of a server that does not know or does not
// allow the shardSelector field.
func refusesShards(err error) bool {
	return (apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)) && strings.Contains(strings.ToLower(err.Error()), "shardselector")
}

func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	sh := c.opts.shard()
	send := sh != nil && sh.ServerSelector() != "" && !c.refused.Load()
	w, err := c.watch(ctx, c.opts.apply(opts, sh, send))
	if err != nil && send && refusesShards(err) {
		c.refused.Store(true)
		send = false
		w, err = c.watch(ctx, c.opts.apply(opts, sh, false))
	}
	if err != nil || sh == nil {
		return w, err
	}
	var reported bool
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Error || e.Type == watch.Bookmark {
			return e, true
		}
		if send && !reported && !contains(sh, e.Object) {
			// An object outside the shard this watch was opened with: the
			// server did not apply it (a watch-list sync has no list
			// answer to tell by).
			reported = true
			c.notApplied("the server sent a watch event outside the shard selector (is the ShardedListAndWatch feature gate off?)")
		}
		cur := c.opts.shard()
		return e, cur == nil || contains(cur, e.Object)
	}), nil
}

// shardInfoOf returns the shardInfo of a list response, or nil.
func shardInfoOf(l runtime.Object) *metav1.ShardInfo {
	switch l := l.(type) {
	case *unstructured.UnstructuredList:
		md, _ := l.Object["metadata"].(map[string]any) // nil when missing or not an object: no shardInfo
		if _, ok := md["shardInfo"]; ok {
			return &metav1.ShardInfo{}
		}
		return nil
	case interface{ GetListMeta() metav1.ListInterface }:
		if lm, ok := l.GetListMeta().(*metav1.ListMeta); ok {
			return lm.ShardInfo
		}
	}
	return nil
}

// fromListObject reads the items and list metadata of any API list type.
// Each item is copied out of the list's array of structs: an item pointing
// into it would keep every object of the page alive for as long as that one
// object stays cached.
func fromListObject[T object.Object](l runtime.Object) (reflector.List[T], error) {
	lm, err := meta.ListAccessor(l)
	if err != nil {
		return reflector.List[T]{}, fmt.Errorf("listwatch: %T is not a list: %w", l, err)
	}
	objs, err := meta.ExtractListWithAlloc(l)
	if err != nil {
		return reflector.List[T]{}, fmt.Errorf("listwatch: items of %T: %w", l, err)
	}
	out := reflector.List[T]{Items: make([]T, 0, len(objs)), ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(),
		RemainingItemCount: lm.GetRemainingItemCount()}
	for _, o := range objs {
		if u, ok := o.(reflector.Undecodable); ok {
			if out.Skipped == 0 {
				out.Skip, out.SkipReason = fmt.Sprintf("list item does not decode: %v", u.Undecodable()), "undecodable"
			}
			out.Skipped++
			continue
		}
		t, ok := o.(T)
		if !ok {
			if out.Skipped == 0 {
				out.Skip = fmt.Sprintf("list item is a %T, not a %T", o, t)
			}
			out.Skipped++
			continue
		}
		out.Items = append(out.Items, t)
	}
	return out, nil
}

// Dynamic adapts the dynamic client: any resource, as unstructured objects.
//
//	lw := listwatch.Dynamic(dyn.Resource(gvr).Namespace(ns), listwatch.Options{})
func Dynamic(ri dynamic.ResourceInterface, opts Options) reflector.ListerWatcher[*unstructured.Unstructured] {
	return New[*unstructured.Unstructured](ri.List, ri.Watch, opts)
}

// Metadata adapts the metadata client: names, labels, annotations and owner
// references only, as *metav1.PartialObjectMetadata.
//
//	lw := listwatch.Metadata(md.Resource(gvr).Namespace(ns), listwatch.Options{})
func Metadata(ri metadata.ResourceInterface, opts Options) reflector.ListerWatcher[*metav1.PartialObjectMetadata] {
	return New[*metav1.PartialObjectMetadata](ri.List, ri.Watch, opts)
}

// PreferProtobuf returns a copy of cfg that asks for protobuf, the API
// server's compact binary encoding, falling back to JSON for types that have
// no protobuf form (custom resources). Typed clientsets built from it list
// and watch built-in types in protobuf; dynamic and metadata clients always
// use JSON whatever the config says.
func PreferProtobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
