// Package v1alpha1 is the Foo custom resource of the sample controller,
// written by hand: plain Go structs with JSON tags, deep-copy methods, and a
// scheme registration. No code generator is needed; see README.md of
// examples/foo for how objects are decoded.
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

// Foo asks for a Deployment named Spec.DeploymentName with Spec.Replicas
// replicas, owned by the Foo; Status mirrors how many are available.
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FooSpec   `json:"spec"`
	Status FooStatus `json:"status,omitempty"`
}

// FooSpec is the desired state.
type FooSpec struct {
	DeploymentName string `json:"deploymentName"`
	Replicas       *int32 `json:"replicas"`
}

// FooStatus is the observed state.
type FooStatus struct {
	AvailableReplicas int32 `json:"availableReplicas"`
	// Message explains why the Foo is not reconciled, e.g. a Deployment of
	// the same name that it does not own.
	Message string `json:"message,omitempty"`
}

// FooList is a list of Foos.
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Foo `json:"items"`
}

// DeepCopyInto copies f into out.
func (f *Foo) DeepCopyInto(out *Foo) {
	*out = *f
	out.TypeMeta = f.TypeMeta
	f.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if f.Spec.Replicas != nil {
		r := *f.Spec.Replicas
		out.Spec.Replicas = &r
	}
}

// DeepCopy returns a copy of f.
func (f *Foo) DeepCopy() *Foo {
	if f == nil {
		return nil
	}
	out := new(Foo)
	f.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (f *Foo) DeepCopyObject() runtime.Object { return f.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *FooList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &FooList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Foo, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// AddToScheme registers Foo and FooList with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Foo{}, &FooList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
