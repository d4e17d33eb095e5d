// Package store is stage 4 of the pipeline (steps 4, 5 and 9 of the
// client-go diagram): the indexed cache the informer writes and every worker
// reads.
//
// Input: objects from the informer, one at a time (Add, Update, Delete), as a
// whole list (Replace), and resource versions from watch bookmarks. Output:
// reads by key, by index value and, through Lister, by label selector and
// namespace with API-style NotFound errors. Keys are those of
// object.MetaNamespaceKeyFunc: "namespace/name", or "name".
//
// Every store has NamespaceIndex (kept from its first read on, built then
// from the entries: a store never read by namespace does not pay for it);
// more index functions can be given to New
// or added later with AddIndexers, even to a populated store. An index
// function may return several values; values that no object carries any more
// are forgotten, so high-cardinality indexes do not leak.
//
// The store knows the resource version it reflects: the newest of the
// versions it has been written, replaced or bookmarked with, compared as
// unsigned integers (etcd revisions) and never moving backwards.
//
// Concurrency contract: every method of Indexer and Lister is safe for
// concurrent use. Readers take a read lock and never block each other,
// except the first read of the namespace index, which builds it under the
// write lock (a pass over the entries). The
// lock is never held while user code runs: index functions are called before
// a write takes the lock, and their results are kept with the object so a
// removal need not call them again. Objects are shared between the store and
// its readers without copying and are read-only for everyone; slices returned
// by reads are fresh snapshots owned by the caller. The store starts no
// goroutines.
//
// Layout: index.go holds the bookkeeping as a plain type with no lock
// (cache, with checkInvariants for tests and fuzzers); store.go and read.go
// wrap it with a sync.RWMutex; indexers.go holds index functions and
// AddIndexers; lister.go the listers.
package store
