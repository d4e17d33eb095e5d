package store_test

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

func pod(ns, name, rv, node string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out) // the store returns objects in no particular order
	return out
}

// A store of pods indexed by node: what a node-level controller would keep.
func ExampleIndexer() {
	s, err := store.New(store.Options[*corev1.Pod]{Indexers: store.Indexers[*corev1.Pod]{
		"node": func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil },
	}})
	if err != nil {
		panic(err)
	}
	_ = s.Replace([]*corev1.Pod{
		pod("shop", "web-1", "10", "node-a", nil),
		pod("shop", "web-2", "11", "node-b", nil),
		pod("bank", "db-1", "12", "node-a", nil),
	}, "12")
	_ = s.Update(pod("shop", "web-2", "13", "node-a", nil)) // rescheduled
	s.Bookmark("15")

	onA, _ := s.ByIndex("node", "node-a")
	inShop, _ := s.ByIndex(store.NamespaceIndex, "shop")
	web2, ok := s.GetByKey("shop/web-2")
	fmt.Println("on node-a:", names(onA))
	fmt.Println("in shop:", names(inShop))
	fmt.Println("shop/web-2:", ok, web2.Spec.NodeName, web2.ResourceVersion)
	fmt.Println("store reflects resource version", s.ResourceVersion())
	// Output:
	// on node-a: [bank/db-1 shop/web-1 shop/web-2]
	// in shop: [shop/web-1 shop/web-2]
	// shop/web-2: true node-a 13
	// store reflects resource version 15
}

// A lister answers the questions a worker asks, with the API's errors.
func ExampleLister() {
	s, err := store.New(store.Options[*corev1.Pod]{})
	if err != nil {
		panic(err)
	}
	for _, p := range []*corev1.Pod{
		pod("shop", "web-1", "1", "", map[string]string{"app": "web"}),
		pod("shop", "db-1", "2", "", map[string]string{"app": "db"}),
		pod("bank", "web-1", "3", "", map[string]string{"app": "web"}),
	} {
		_ = s.Add(p)
	}
	l := store.NewLister(store.NewReader(s), schema.GroupResource{Resource: "pods"})

	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	fmt.Println("web everywhere:", names(l.List(web)))
	fmt.Println("all in shop:", names(l.Namespace("shop").List(labels.Everything())))
	got, _ := l.Namespace("bank").Get("web-1")
	fmt.Println("got:", got.Namespace+"/"+got.Name)
	_, err = l.Namespace("bank").Get("db-1")
	fmt.Println(apierrors.IsNotFound(err), err)
	// Output:
	// web everywhere: [bank/web-1 shop/web-1]
	// all in shop: [shop/db-1 shop/web-1]
	// got: bank/web-1
	// true pods "db-1" not found
}

// A reconciler is given a Reader: it reads by typed name and lists by
// namespace and label selector, and cannot write the informer's cache.
func ExampleReader() {
	s, _ := store.New(store.Options[*corev1.Pod]{})
	_ = s.Add(pod("shop", "web-1", "10", "n1", map[string]string{"app": "web"}))
	_ = s.Add(pod("shop", "db-1", "11", "n1", map[string]string{"app": "db"}))
	_ = s.Add(pod("blog", "web-1", "12", "n2", map[string]string{"app": "web"}))
	r := store.NewReader(s)

	p, ok := r.Get(object.ObjectName{Namespace: "shop", Name: "web-1"})
	fmt.Println(p.Spec.NodeName, ok)
	_, ok = r.Get(object.ObjectName{Namespace: "shop", Name: "gone"})
	fmt.Println(ok)
	fmt.Println(names(r.List("shop", nil)))
	fmt.Println(names(r.List("", labels.SelectorFromSet(labels.Set{"app": "web"}))))
	// Output:
	// n1 true
	// false
	// [shop/db-1 shop/web-1]
	// [blog/web-1 shop/web-1]
}

// A Reader's index lookups are client-go's Indexer's: objects or keys under
// a value, and the values present.
func ExampleReader_IndexKeys() {
	byNode := func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil }
	s, _ := store.New(store.Options[*corev1.Pod]{Indexers: store.Indexers[*corev1.Pod]{"node": byNode}})
	_ = s.Add(pod("shop", "web-1", "10", "n1", nil))
	_ = s.Add(pod("shop", "db-1", "11", "n1", nil))
	_ = s.Add(pod("blog", "web-1", "12", "n2", nil))
	r := store.NewReader(s)

	keys, _ := r.IndexKeys("node", "n1")
	slices.Sort(keys)
	fmt.Println(keys)
	nodes, _ := r.ListIndexFuncValues("node")
	slices.Sort(nodes)
	fmt.Println(nodes)
	// Output:
	// [shop/db-1 shop/web-1]
	// [n1 n2]
}
