package informer_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// An informer over a clientset's ConfigMaps with one handler. Here the
// clientset is client-go's in-memory fake; with a real one, the code is the
// same.
func ExampleNewIndexerInformer() {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	cms := cs.CoreV1().ConfigMaps("default")
	lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})

	added := make(chan string, 1)
	cache, inf, err := informer.NewIndexerInformer(lw, handler.Funcs[*corev1.ConfigMap]{
		AddFunc: func(c *corev1.ConfigMap, initial bool) {
			added <- fmt.Sprintf("add %s/%s (initial list: %v)", c.Namespace, c.Name, initial)
		},
	}, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.TODO())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	fmt.Println(<-added)
	fmt.Println("cached:", cache.Keys())
	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// add default/settings (initial list: true)
	// cached: [default/settings]
	// run: <nil>
}
