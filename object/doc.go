// Package object is the vocabulary every stage of the pipeline shares: the
// small constraint a cached object must satisfy, store keys and typed object
// names, resource-version ordering, and the typed tombstone delivered when an
// object is deleted.
//
// It sits beside the pipeline rather than in it: the reflector, the delta
// FIFO, the informer, the store and the handlers all import it, and it
// imports only the standard library (and no other ctrlkit package), so it can
// never create an import cycle.
//
// Inputs and outputs: objects in (any type with namespace, name and resource
// version accessors, such as *corev1.Pod, *unstructured.Unstructured or
// *metav1.PartialObjectMetadata), keys and names out.
//
// Concurrency: every function here is pure and safe for concurrent use; the
// types are plain values.
package object
