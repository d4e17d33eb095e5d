// Package v1 is the Website custom resource of the guide's operator.
//
// +kubebuilder:object:generate=true
// +groupName=example.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

// GroupVersion is the group and version Websites are served at.
var GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}

// AddToScheme registers Website and WebsiteList (manager.Options.AddToScheme).
var AddToScheme = object.AddToScheme(GroupVersion, &Website{}, &WebsiteList{})
