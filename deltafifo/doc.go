// Package deltafifo is stage 2 of the pipeline (steps 2 and 3 of the
// client-go diagram): the queue between the reflector, which produces
// changes in server order, and the informer, which applies them to its
// cache and notifies handlers.
//
//	reflector ──Add/Update/Delete/relist/Bookmark──> FIFO ──Pop──> informer
//
// Input: the reflector.Sink calls. Output, from Pop, one Item at a time:
// the deltas of one key, a relist (whole, or one part of it) or a bookmark;
// or from PopBatch, the deltas of many keys under one lock (a relist part
// or a bookmark still comes alone), the previous batch handed back so that
// its delta slices serve later changes without allocating.
//
// # Rules
//
//   - Per key, deltas are kept in server order, and a key keeps its place in
//     the queue while it is queued, however often it changes.
//   - A key holds the deltas of at most two lives of an object, so memory
//     stays bounded under a burst on one key: consecutive updates compact
//     to the newest object, consecutive deletes collapse, and a delete drops
//     the updates queued before it (the deleted object carries their final
//     state). An add stays before the delete that ends its object, so that
//     an object created and deleted while its key was queued is told as an
//     add then a delete, as client-go tells it. Of three or more objects
//     that lived under one key while it was queued, the first (the end of
//     the one the consumer may hold) and the last are kept, and those
//     between are dropped with their deltas. An update after an add is kept
//     beside it, so that handlers hear the add and then the update, as
//     client-go's do (a handler acting on updates does not miss one that
//     came before the add was popped). A queued key is therefore at most
//     two lives of the shape [Added] [Updated | Deleted], every one but
//     the last ending with its delete: four deltas. The consumer reads the
//     "old" object of an update from its cache, so a handler still sees
//     old -> newest across a compaction.
//   - A relist supersedes everything still queued: it holds the final state
//     of every key. The deleted objects of the deletes it drops go with it
//     (Finals), so that the consumer can tell the deletion of an object the
//     relist lacks with the state the watch delivered rather than as
//     unknown. Given whole (Replace), it is popped as one Item so that
//     the consumer can swap its cache in one step. Given in parts (the
//     reflector.RelistSink methods BeginRelist, RelistItems, RelistDelete,
//     EndRelist, which the reflector uses), each part is popped as it comes
//     and the producer waits while MaxQueuedRelistParts are queued, so a
//     relist never sits whole beside the consumer's cache. Deltas that
//     arrive after a relist are popped after it.
//   - A bookmark is popped only when nothing queued before it remains, so a
//     consumer that records it never claims a version it has not applied.
//
// There is no Sync delta: per-handler resync replays the informer's cache
// without going through the queue. Nor is there a HasSynced here: since the
// consumer processes Items outside the FIFO, only it knows when the first
// relist has been applied and handed on (informer.SharedIndexInformer's
// HasSynced).
//
// # Concurrency
//
// Every method is safe for concurrent use. The reflector calls the Sink
// methods from one goroutine; Pop blocks until an Item is ready, the context
// ends or Close is called. No user code runs under the FIFO's lock: Pop
// returns the Item and the caller processes it outside (unlike client-go's
// Pop, which calls back under the lock). The FIFO starts no goroutine.
//
// Layout: deltas.go holds the per-key compaction as pure functions;
// fifo.go the locked queue.
package deltafifo
