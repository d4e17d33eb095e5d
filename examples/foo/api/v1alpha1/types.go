package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Foo asks for a Deployment named Spec.DeploymentName with Spec.Replicas
// replicas, owned by the Foo; Status mirrors how many are available.
//
// The controller labels the Deployment's Pods with the Foo's name, so the
// name is at most 63 characters (a label value).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="the name of a Foo labels its Deployment's Pods: at most 63 characters"
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec FooSpec `json:"spec"`
	// +optional
	Status FooStatus `json:"status,omitempty"`
}

// FooSpec is the desired state.
type FooSpec struct {
	// DeploymentName names the Deployment the Foo owns: a DNS subdomain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DeploymentName string `json:"deploymentName"`
	// Replicas is the number of Pods the Deployment runs.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas"`
}

// FooStatus is the observed state.
type FooStatus struct {
	// AvailableReplicas mirrors the Deployment's available replicas.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`
	// Message explains why the Foo is not reconciled, e.g. a Deployment of
	// the same name that it does not own.
	// +optional
	Message string `json:"message,omitempty"`
}

// FooList is a list of Foos.
//
// +kubebuilder:object:root=true
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Foo `json:"items"`
}
