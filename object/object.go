package object

import "k8s.io/apimachinery/pkg/types"

// Object is what the pipeline needs to know about a cached object: where it
// lives and which version of it this is. It is deliberately small; every
// Kubernetes API type satisfies it through its embedded ObjectMeta
// (*corev1.Pod, *appsv1.Deployment, ...), as do *unstructured.Unstructured
// and *metav1.PartialObjectMetadata.
//
// Implementations are pointers in practice. A nil pointer is not an object:
// passing one where an Object is expected is a programming error.
type Object interface {
	// GetNamespace returns the namespace, or "" for a cluster-scoped object.
	GetNamespace() string
	// GetName returns the name, unique within the namespace.
	GetName() string
	// GetResourceVersion returns the opaque version the API server assigned
	// to this state of the object ("" when unknown).
	GetResourceVersion() string
}

// Labeled is an Object whose labels can be read, as label selectors need.
// Only code that matches selectors (listers) asks for it.
type Labeled interface {
	Object
	// GetLabels returns the object's labels. Callers must not modify the map.
	GetLabels() map[string]string
}

// Recreated reports whether b is another object than a under the same
// name: both carry a UID (metadata.uid) and the two differ, so a was
// deleted and b created in its place. Objects without a UID, or with an
// empty one, are never recreated.
func Recreated[T Object](a, b T) bool {
	ua, ub := UIDOf(a), UIDOf(b)
	return ua != "" && ub != "" && ua != ub
}

// UIDOf returns obj's UID (metadata.uid), "" if it has none.
func UIDOf(obj Object) types.UID {
	if u, ok := obj.(interface{ GetUID() types.UID }); ok {
		return u.GetUID()
	}
	return ""
}
