// Package ledger gives a controller read-your-writes: a reconcile never acts
// on a cache older than its own earlier writes.
//
// The hazard: a reconcile creates a child, and the key is reconciled again
// (a resync, another event, a requeue) before the informer has delivered
// the child. The cache shows no child, and the reconcile creates a second
// one. Kubernetes' own controllers guard against it with "expectations";
// every Go library leaves it to the user.
//
// The ledger records, per owner key, every write made on its behalf: the
// object (group, resource, namespace, name) and the resource version the
// server returned, or that it was deleted. It learns them from the HTTP
// responses (Transport wraps a rest.Config's transport; the owner travels in
// the request's context, see WithOwner), so it works with typed, dynamic and
// metadata clients alike. Before a worker gets the key again, the Gate holds
// it until every informer that caches a written resource has applied, for
// that object, a version at least as new as the write (or the delete) — per
// key, since a cache follows server order per key, not across keys. A bound
// (default 5s) lets a held key through anyway and counts it; a key is never
// lost and never held forever.
//
// Writes of resources no informer caches are not waited for. Resource
// versions the server returns that are not numbers cannot be compared: such
// a write waits for the bound. Responses are read in JSON and in Kubernetes
// protobuf (the manager's clients use protobuf for built-in types).
//
// Concurrency: a Ledger is safe for concurrent use. Its hooks (Observe) are
// cheap when nothing is pending: one atomic load.
package ledger
