package object_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

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

// Two states under one name are one object while their UIDs agree: a
// relist that finds another UID has found the object deleted and created
// again. Without UIDs (a fake or a projection) nothing is recreated.
func ExampleRecreated() {
	meta := func(uid types.UID, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: uid, ResourceVersion: rv}}
	}
	fmt.Println(object.Recreated(meta("u1", "5"), meta("u1", "9")))
	fmt.Println(object.Recreated(meta("u1", "5"), meta("u2", "9")))
	fmt.Println(object.Recreated(meta("", "5"), meta("u2", "9")))
	// Output:
	// false
	// true
	// false
}
