package handler_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
)

// printQueue stands in for a workqueue.Queue[string].
type printQueue struct{}

func (printQueue) Add(key string) { fmt.Println("queued", key) }

// A controller usually enqueues the key of every changed object, here only
// for ConfigMaps labelled app=web: one that loses the label is a delete.
func ExampleEnqueueKey() {
	h := handler.Filtering[*corev1.ConfigMap]{
		Filter:  func(c *corev1.ConfigMap) bool { return c.Labels["app"] == "web" },
		Handler: handler.EnqueueKey[*corev1.ConfigMap](printQueue{}, nil),
	}
	web := map[string]string{"app": "web"}
	h.OnAdd(cm("shop", "front", "1", web), true)
	h.OnAdd(cm("shop", "db", "2", nil), true)
	h.OnUpdate(cm("shop", "front", "1", web), cm("shop", "front", "3", nil))
	// Output:
	// queued shop/front
	// queued shop/front
}

// Funcs adapts plain functions; tombstones say whether the final state was
// seen.
func ExampleFuncs() {
	h := handler.Funcs[*corev1.ConfigMap]{
		DeleteFunc: func(d object.Deleted[*corev1.ConfigMap]) {
			fmt.Printf("deleted %s (final state unknown: %v)\n", d.Name, d.FinalStateUnknown)
		},
	}
	h.OnAdd(cm("ns", "a", "1", nil), false) // no AddFunc: ignored
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}, Obj: cm("ns", "a", "1", nil), HasObj: true, FinalStateUnknown: true})
	// Output:
	// deleted ns/a (final state unknown: true)
}
