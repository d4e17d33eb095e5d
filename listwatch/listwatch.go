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
	"github.com/ctrlkit/ctrlkit/shard"
)

// ListerWatcher lists and watches one resource. T is the object type the
// list items and watch events carry, e.g. *corev1.Pod.
type ListerWatcher[T object.Object] interface {
	// List returns one page of objects. It blocks on the API server.
	List(ctx context.Context, opts metav1.ListOptions) (List[T], error)
	// Watch starts a watch. Events carry T, except Error events (a
	// *metav1.Status) and objects the server sent that are not a T; the
	// Reflector skips those with a log line and a metric.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// List is one page of a list.
type List[T object.Object] struct {
	Items           []T
	ResourceVersion string // the list's resource version
	Continue        string // token for the next page; "" on the last page
	// Skipped counts items that were not a T and were left out; Skip
	// describes the first of them.
	Skipped int
	Skip    string
	// ShardApplied reports that the server applied Options.Shard to this
	// page (it echoed metadata.shardInfo). When it did not, the adapter
	// filtered the page itself, as it filters every watch event.
	ShardApplied bool
}

// Options apply to every List and Watch call of an adapter.
type Options struct {
	// LabelSelector restricts objects by label, e.g. "app=web,tier!=db".
	// Default: everything.
	LabelSelector string
	// FieldSelector restricts objects by field, e.g. "spec.nodeName=n1".
	// Default: everything.
	FieldSelector string
	// Shard restricts objects to ranges of the hash of their UID or
	// namespace. It is sent as ListOptions.ShardSelector, which servers
	// with the ShardedListAndWatch feature apply to lists and watches; the
	// adapter also filters every list item and watch event itself, so the
	// result is the same on a server without the feature (only the bytes
	// received differ; see List.ShardApplied). Default: everything.
	Shard *shard.Selector
	// ShardFunc, when set, takes Shard's place and may change what it
	// returns while the adapter is in use (a replica whose share changed):
	// it is called at every List and Watch and for every watch event. After
	// a change, make the informer list again (SharedIndexInformer.Relist).
	// A nil result selects everything.
	ShardFunc func() *shard.Selector
	// ShardByController matches the selector against the UID of each
	// object's controller (its owner reference with controller: true)
	// instead of the object's own UID or namespace: objects owned by
	// primaries of a shard follow their owner. The server cannot apply
	// that, so nothing is sent and the adapter filters alone; objects
	// without a controller are left out.
	ShardByController bool
	// OnShardNotApplied, when set, is called for each list page that the
	// server sent unfiltered (no metadata.shardInfo in the answer, or it
	// refused the field, after which the adapter stops sending it) and for
	// each watch whose events show it unfiltered (an object outside the
	// selector it was opened with), with the reason; the adapter filtered
	// them itself.
	OnShardNotApplied func(reason string)
}

// selector returns the shard selection in force, or nil.
func (o *Options) selector() *shard.Selector {
	if o.ShardFunc != nil {
		return o.ShardFunc()
	}
	return o.Shard
}

// matches reports whether obj is in sel, by its own key or its controller's.
func (o *Options) matches(sel *shard.Selector, obj any) bool {
	if !o.ShardByController {
		so, ok := obj.(shard.Object)
		return !ok || sel.Matches(so)
	}
	mo, ok := obj.(metav1.Object)
	if !ok {
		return true
	}
	ref := metav1.GetControllerOfNoCopy(mo)
	return ref != nil && sel.MatchesValue(string(ref.UID))
}

func (o *Options) apply(opts metav1.ListOptions, sel *shard.Selector, send bool) metav1.ListOptions {
	if sel != nil && send && !o.ShardByController {
		opts.ShardSelector = sel.String()
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
//
// It panics on an invalid opts.Shard (see shard.Selector.Validate): a
// programming error, like an invalid regular expression to MustCompile.
func New[T object.Object, L runtime.Object](list ListFunc[L], watch WatchFunc, opts Options) ListerWatcher[T] {
	if opts.Shard != nil {
		if err := opts.Shard.Validate(); err != nil {
			panic(fmt.Sprintf("listwatch: %v", err))
		}
	}
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

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (List[T], error) {
	sel := c.opts.selector()
	l, err := c.list(ctx, c.opts.apply(opts, sel, !c.refused.Load()))
	if err != nil && sel != nil && !c.refused.Load() && refusesShards(err) {
		c.refused.Store(true)
		c.notApplied(fmt.Sprintf("the server refused the shard selector: %v", err))
		l, err = c.list(ctx, c.opts.apply(opts, sel, false))
	}
	if err != nil {
		return List[T]{}, err
	}
	out, err := fromListObject[T](l)
	if err != nil || sel == nil {
		return out, err
	}
	out.ShardApplied = !c.opts.ShardByController && !c.refused.Load() && shardInfoOf(l) != nil
	if !out.ShardApplied && !c.opts.ShardByController && !c.refused.Load() {
		c.notApplied("the server sent the list without metadata.shardInfo (is the ShardedListAndWatch feature gate off?)")
	}
	kept := out.Items[:0]
	for _, it := range out.Items {
		if c.opts.matches(sel, it) {
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
	sel := c.opts.selector()
	w, err := c.watch(ctx, c.opts.apply(opts, sel, !c.refused.Load()))
	if err != nil && sel != nil && !c.refused.Load() && refusesShards(err) {
		c.refused.Store(true)
		w, err = c.watch(ctx, c.opts.apply(opts, sel, false))
	}
	if err != nil || (c.opts.Shard == nil && c.opts.ShardFunc == nil) {
		return w, err
	}
	sent := sel != nil && !c.refused.Load() && !c.opts.ShardByController
	var reported bool
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Error || e.Type == watch.Bookmark {
			return e, true
		}
		if sent && !reported && !c.opts.matches(sel, e.Object) {
			// An object outside the selector this watch was opened with:
			// the server did not apply it (a watch-list sync has no list
			// answer to tell by).
			reported = true
			c.notApplied("the server sent a watch event outside the shard selector (is the ShardedListAndWatch feature gate off?)")
		}
		cur := c.opts.selector()
		return e, cur == nil || c.opts.matches(cur, e.Object)
	}), nil
}

// shardInfoOf returns the shardInfo of a list response, or nil.
func shardInfoOf(l runtime.Object) *metav1.ShardInfo {
	switch l := l.(type) {
	case *unstructured.UnstructuredList:
		if _, ok := l.Object["metadata"].(map[string]any)["shardInfo"]; ok {
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
func fromListObject[T object.Object](l runtime.Object) (List[T], error) {
	lm, err := meta.ListAccessor(l)
	if err != nil {
		return List[T]{}, fmt.Errorf("listwatch: %T is not a list: %w", l, err)
	}
	objs, err := meta.ExtractListWithAlloc(l)
	if err != nil {
		return List[T]{}, fmt.Errorf("listwatch: items of %T: %w", l, err)
	}
	out := List[T]{Items: make([]T, 0, len(objs)), ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue()}
	for _, o := range objs {
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
func Dynamic(ri dynamic.ResourceInterface, opts Options) ListerWatcher[*unstructured.Unstructured] {
	return New[*unstructured.Unstructured](ri.List, ri.Watch, opts)
}

// Metadata adapts the metadata client: names, labels, annotations and owner
// references only, as *metav1.PartialObjectMetadata.
//
//	lw := listwatch.Metadata(md.Resource(gvr).Namespace(ns), listwatch.Options{})
func Metadata(ri metadata.ResourceInterface, opts Options) ListerWatcher[*metav1.PartialObjectMetadata] {
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
