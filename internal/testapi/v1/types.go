// Package v1 is Gadget's first version, a spoke of v2.
//
// +kubebuilder:object:generate=true
// +groupName=gadgets.webhook.ctrlkit.test
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
)

// SchemeGroupVersion is this version's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: "gadgets.webhook.ctrlkit.test", Version: "v1"}

// AddToScheme registers Gadget and GadgetList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Gadget{}, &GadgetList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Gadget v1 has its image at the top of its spec.
//
// +kubebuilder:object:root=true
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

// ConvertTo fills the hub from g.
func (g *Gadget) ConvertTo(hub *v2.Gadget) error {
	hub.ObjectMeta = g.ObjectMeta
	hub.Spec.Replicas = g.Spec.Replicas
	hub.Spec.Container.Image = g.Spec.Image
	return nil
}

// ConvertFrom fills g from the hub.
func (g *Gadget) ConvertFrom(hub *v2.Gadget) error {
	g.ObjectMeta = hub.ObjectMeta
	g.Spec.Replicas = hub.Spec.Replicas
	g.Spec.Image = hub.Spec.Container.Image
	return nil
}
