package deltafifo_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/deltafifo"
)

// A FIFO keeps each key's deltas, oldest first, and pops keys in the order
// they were first queued.
func ExampleFIFO() {
	cm := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv}}
	}
	f := deltafifo.New[*corev1.ConfigMap]()
	_ = f.Add(cm("web", "1"))
	_ = f.Add(cm("db", "2"))
	_ = f.Update(cm("web", "3"))
	fmt.Println(f.ListKeys())
	ds, _ := f.GetByKey("shop/web")
	fmt.Println(len(ds), ds[0].Type, ds[1].Type)

	item, _ := f.Pop(context.Background())
	fmt.Println(item.Key, len(item.Deltas), f.ListKeys())
	// Output:
	// [shop/web shop/db]
	// 2 Added Updated
	// shop/web 2 [shop/db]
}
