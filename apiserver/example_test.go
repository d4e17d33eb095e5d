package apiserver_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

// Start a real API server, write an object and read it back, then stop.
func ExampleStart() {
	ctx := context.TODO() // a test would use t.Context()
	srv, err := apiserver.Start(ctx, apiserver.Options{})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer srv.Stop()

	cs := kubernetes.NewForConfigOrDie(srv.Config())
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "greeting"},
		Data:       map[string]string{"hello": "world"},
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		fmt.Println("create:", err)
		return
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "greeting", metav1.GetOptions{})
	if err != nil {
		fmt.Println("get:", err)
		return
	}
	fmt.Println(got.Name, got.Data["hello"])
	// Output: greeting world
}
