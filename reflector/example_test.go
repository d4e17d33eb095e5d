package reflector_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// printSink prints what the reflector tells it and signals the first sync.
type printSink struct{ synced chan struct{} }

func (s printSink) Replace(items []*corev1.Pod, _ string) error {
	for _, p := range items {
		fmt.Println("synced", p.Namespace+"/"+p.Name)
	}
	close(s.synced)
	return nil
}
func (printSink) Add(p *corev1.Pod) error    { fmt.Println("added", p.Name); return nil }
func (printSink) Update(p *corev1.Pod) error { fmt.Println("updated", p.Name); return nil }
func (printSink) Delete(p *corev1.Pod) error { fmt.Println("deleted", p.Name); return nil }
func (printSink) Bookmark(string)            {}

// A reflector over a clientset's Pods. Here the clientset is client-go's
// in-memory fake; with a real one, the code is the same.
func Example() {
	cs := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}})
	pods := cs.CoreV1().Pods("default")
	lw := listwatch.New[*corev1.Pod](pods.List, pods.Watch, listwatch.Options{})

	sink := printSink{synced: make(chan struct{})}
	r, err := reflector.New(lw, sink, reflector.Options{DisableWatchList: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.TODO())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-sink.synced
	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// synced default/web
	// run: <nil>
}
