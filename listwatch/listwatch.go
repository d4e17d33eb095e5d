package listwatch

import (
	"context"
	"fmt"

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
}

func (o Options) apply(opts metav1.ListOptions) metav1.ListOptions {
	if o.Shard != nil {
		opts.ShardSelector = o.Shard.String()
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
}

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (List[T], error) {
	l, err := c.list(ctx, c.opts.apply(opts))
	if err != nil {
		return List[T]{}, err
	}
	out, err := fromListObject[T](l)
	if err != nil || c.opts.Shard == nil {
		return out, err
	}
	out.ShardApplied = shardInfoOf(l) != nil
	kept := out.Items[:0]
	for _, it := range out.Items {
		if o, ok := any(it).(shard.Object); !ok || c.opts.Shard.Matches(o) {
			kept = append(kept, it)
		}
	}
	clear(out.Items[len(kept):])
	out.Items = kept
	return out, nil
}

func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.watch(ctx, c.opts.apply(opts))
	if err != nil || c.opts.Shard == nil {
		return w, err
	}
	sel := c.opts.Shard
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		o, ok := e.Object.(shard.Object)
		if !ok || e.Type == watch.Error || e.Type == watch.Bookmark {
			return e, true
		}
		return e, sel.Matches(o)
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
