package object_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// An API package's registration: its group and version, and AddToScheme
// for manager.Options.AddToScheme. (ConfigMap stands in for a custom
// resource's Go type here.)
func ExampleAddToScheme() {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	addToScheme := object.AddToScheme(gv, &corev1.ConfigMap{}, &corev1.ConfigMapList{})

	s := runtime.NewScheme()
	if err := addToScheme(s); err != nil {
		fmt.Println(err)
		return
	}
	gvks, _, _ := s.ObjectKinds(&corev1.ConfigMap{})
	fmt.Println(gvks[0])
	// Output: example.com/v1, Kind=ConfigMap
}
