// Package v1alpha1 is the Foo custom resource of the sample controller:
// plain Go structs with JSON tags and controller-gen markers. Its deep-copy
// methods (zz_generated.deepcopy.go), its CRD and the controller's RBAC
// role are generated from them; see README.md of examples/foo. Every type
// of the package gets deep-copy methods (object:generate), and those
// marked object:root a DeepCopyObject too.
//
// +kubebuilder:object:generate=true
// +groupName=samplecontroller.ctrlkit.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Foo.
const GroupName = "samplecontroller.ctrlkit.dev"

// SchemeGroupVersion is the group and version Foo is served at.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource is the plural resource name of Foo, as RBAC and the API paths use it.
var Resource = SchemeGroupVersion.WithResource("foos")

// AddToScheme registers Foo and FooList with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Foo{}, &FooList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
