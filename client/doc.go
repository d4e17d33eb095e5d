// Package client is one typed client for any API type in a scheme,
// built-in (ConfigMap, Deployment) or custom (a CustomResourceDefinition's
// Go type), with no generated clientset:
//
//	foos, err := client.NewForConfig[*v1.Foo](restConfig, scheme)
//	foo, err := foos.Get(ctx, object.ObjectName{Namespace: "ns", Name: "a"})
//
// (client.New builds one over a listwatch.Discovery, sharing its
// connections and RESTMapper.)
// It is not a pipeline stage: reconcilers write through it (reads usually
// come from an informer's cache). The manager hands one out with
// manager.Client, sharing its HTTP connections, its RESTMapper and its
// read-your-writes ledger, so that writes made inside a reconcile are
// waited for like the clientset's.
//
// Each Client is a thin layer over client-go's generic typed client
// (k8s.io/client-go/gentype): the kind comes from the scheme, the resource
// and scope from discovery at the first call (not at New, so a
// CustomResourceDefinition installed later is found), built-in types are
// sent and read as protobuf, custom ones as JSON. Names are
// object.ObjectName, as everywhere in ctrlkit.
//
// Errors are the API server's, wrapped with %w (apierrors.IsConflict,
// IsNotFound, ... still hold), and clear errors for what the server cannot
// explain: a type missing from the scheme, a kind the server does not
// serve (meta.IsNoMatchError), a status write on a resource without a
// status subresource (ErrNoStatusSubresource), a name without the
// namespace its resource needs.
//
// There is no Watch: watch through an informer (manager.Informer), which
// also recovers from every failure. Each Client has its own REST client,
// hence its own client-side rate limit (the rest.Config's QPS and Burst).
//
// A Client is safe for concurrent use and starts no goroutine.
package client
