// Package v2 is Gadget's hub version, the one stored.
//
// +kubebuilder:object:generate=true
// +groupName=gadgets.webhook.ctrlkit.test
package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is this version's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: "gadgets.webhook.ctrlkit.test", Version: "v2"}

// AddToScheme registers Gadget and GadgetList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Gadget{}, &GadgetList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Gadget v2 holds its image inside a container.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec,omitempty"`
}

// GadgetSpec is what a Gadget wants.
type GadgetSpec struct {
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	Container Container `json:"container,omitempty"`
}

// Container is what a Gadget runs.
type Container struct {
	// +optional
	Image string `json:"image,omitempty"`
}

// GadgetList is a list of Gadgets.
//
// +kubebuilder:object:root=true
type GadgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gadget `json:"items"`
}
