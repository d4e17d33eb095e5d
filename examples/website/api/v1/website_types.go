package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Website is a static site: a Deployment serving Spec.Image behind a
// Service, listed under Spec.Host in the cluster's site directory.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.host`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
type Website struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebsiteSpec   `json:"spec"`
	Status WebsiteStatus `json:"status,omitempty"`
}

// WebsiteSpec is what the user asks for.
type WebsiteSpec struct {
	// Host is the name the site answers to.
	// +kubebuilder:validation:MinLength=1
	Host string `json:"host"`
	// Image is the container image serving the site on port 80; the
	// defaulting webhook sets one when it is empty.
	// +optional
	Image string `json:"image,omitempty"`
	// Replicas is how many Pods serve it.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
}

// WebsiteStatus is what the operator observed.
type WebsiteStatus struct {
	// ObservedGeneration is the generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// AvailableReplicas is how many Pods serve the site.
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// Conditions: Ready is True when every replica is available.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WebsiteList is a list of Websites.
//
// +kubebuilder:object:root=true
type WebsiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Website `json:"items"`
}
