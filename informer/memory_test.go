package informer_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// A typed client decodes a list into one array of structs. Cached objects
// must not point into it, or one object that never changes keeps the whole
// array (every object of its page) alive next to the newer copies. And once
// the cache has replaced an object, nothing else may keep it: not the
// reflector's queue of actions (the relist's items), nor the FIFO.
func TestInformer_aListsObjectsAreCollectableOnceTheCacheHasReplacedThem(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unchanged int // objects of the list never updated
	}{
		{name: "every object replaced", unchanged: 0},
		{name: "one object unchanged does not pin the others", unchanged: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			const n = 1000
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(n)},
				Items: make([]corev1.ConfigMap, n)}
			for k := range list.Items {
				list.Items[k].ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("cm-", k),
					ResourceVersion: strconv.Itoa(k + 1)}
			}
			array := weak.Make(&list.Items[0]) // the list's array of structs
			lists := make(chan *corev1.ConfigMapList, 1)
			lists <- list
			list = nil
			events := make(chan watch.Event, n)
			lw := listwatch.New[*corev1.ConfigMap](
				func(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
					select {
					case l := <-lists:
						return l, nil
					default:
						return nil, errors.New("listed once already")
					}
				},
				func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					return watch.NewProxyWatcher(events), nil
				}, listwatch.Options{})
			inf, err := informer.New(lw, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}}})
			if err != nil {
				t.Fatal(err)
			}
			m := newMirror()
			register(t, inf, m, "h", 0)
			run(t, inf)
			want := map[string]string{}
			for k := range n {
				want[fmt.Sprint("cm-", k)] = strconv.Itoa(k + 1)
			}
			m.waitForView(t, wait, func() map[string]string { return want })
			var cached []weak.Pointer[corev1.ConfigMap] // the objects the first list put in the cache
			for k := range n - tc.unchanged {
				obj, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: fmt.Sprint("cm-", k)})
				if !ok {
					t.Fatalf("cm-%d is not cached", k)
				}
				cached = append(cached, weak.Make(obj))
			}
			for k := range n - tc.unchanged { // the unchanged ones are last, far from the array's start
				name, rv := fmt.Sprint("cm-", k), strconv.Itoa(n+k+1)
				events <- watch.Event{Type: watch.Modified, Object: &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}}
				want[name] = rv
			}
			m.waitForView(t, wait, func() map[string]string { return want })

			runtime.GC()
			runtime.GC()
			if array.Value() != nil {
				t.Errorf("the first list's array of %d ConfigMaps is still reachable after the cache replaced %d of them",
					n, n-tc.unchanged)
			}
			reachable := 0
			for _, p := range cached {
				if p.Value() != nil {
					reachable++
				}
			}
			if reachable > 0 {
				t.Errorf("%d of the %d objects the first list cached are still reachable after the cache replaced them",
					reachable, len(cached))
			}
		})
	}
}
