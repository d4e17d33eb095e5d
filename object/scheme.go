package object

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AddToScheme returns the function that registers types (pointers to the
// API structs of one group and version: a custom resource's type and its
// list) with a scheme under gv, with the options types (ListOptions, ...)
// every group and version needs. It is an API package's AddToScheme, the
// function manager.Options.AddToScheme takes:
//
//	var GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}
//	var AddToScheme = object.AddToScheme(GroupVersion, &Website{}, &WebsiteList{})
func AddToScheme(gv schema.GroupVersion, types ...runtime.Object) func(*runtime.Scheme) error {
	return func(s *runtime.Scheme) error {
		s.AddKnownTypes(gv, types...)
		metav1.AddToGroupVersion(s, gv)
		return nil
	}
}

// APIObject is an API type as client-go and controller-gen make them: a
// pointer to a struct with object metadata that is a runtime.Object
// (*corev1.Pod, a custom resource's Go type). It is what a typed client
// reads and writes, a manager caches and a finalizer patches:
// client.Object, manager.Object and apply.Object are this one interface.
type APIObject interface {
	metav1.Object
	runtime.Object
}
