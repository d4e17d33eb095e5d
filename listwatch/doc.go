// Package listwatch is the IO edge of step 1 of the pipeline: a
// ListerWatcher lists and watches one resource of the Kubernetes API for a
// Reflector.
//
// Adapters cover the three kinds of client-go clients:
//
//   - New, over a typed clientset's List and Watch methods (built-in types,
//     protobuf on the wire when the client's config asks for it; see
//     PreferProtobuf);
//   - Dynamic, over the dynamic client (*unstructured.Unstructured: any
//     resource, custom resources included);
//   - Metadata, over the metadata client (*metav1.PartialObjectMetadata:
//     names, labels and owners only, the cheapest way to watch many objects).
//
// Each takes Options with label and field selectors applied to every call.
// The adapters hold no state and are safe for concurrent use.
package listwatch
