// Package informer is stage 3 of the pipeline (steps 3 to 6 of the
// client-go diagram): it wires a reflector, a delta FIFO and an indexed
// cache for one resource, and tells any number of handlers about every
// change.
//
//	ListerWatcher ─> reflector ─> transform ─> deltafifo ─PopBatch─> cache (store.Indexer)
//	                                                                   │ notifications
//	                                                   ┌───────────────┼───────────────┐
//	                                               listener        listener        listener
//	                                              (goroutine)     (goroutine)     (goroutine)
//	                                               handler A       handler B       handler C
//
// Guarantees:
//
//   - The cache is written in server order per key. A relist is applied as
//     its pages (or watch-list events) arrive, never held whole beside the
//     cache: each listed object replaces the cached one at once (handlers
//     hear an add, or an update if its resource version changed; an object
//     the relist found unchanged notifies nobody), and at the end every
//     cached object the relist lacked is deleted (tombstones with the last
//     known object, FinalStateUnknown; or with the final state of a watch
//     delete the relist superseded in the FIFO, as a plain delete). Readers
//     may see a mix of listed and
//     not yet listed objects meanwhile, as with client-go; each is a state
//     the server had.
//   - Each handler hears a key's changes in order, after the cache holds
//     them, from its own goroutine: every notification, until more than 16
//     of one key wait for it. Then its backlog coalesces that key's (add
//     then update is one add of the
//     newest, update then update is one update from the oldest old to the
//     newest, add then delete is nothing, update then delete is the
//     delete), so it is bounded by the number of distinct keys (at most 16
//     notifications a key, each holding its object: a handler lagging on
//     many keys holds up to that many versions of each) and a slow handler
//     delays only itself. A backlog is told key by key, the keys in the
//     order each first waited: a busy handler given add a, add b, update a
//     hears add a, update a, add b (client-go's listener keeps the
//     interleaving across keys). The lag is exported as metrics
//     (ctrlkit_informer_handler_pending_keys and
//     ctrlkit_informer_handler_oldest_pending_seconds, by informer and handler).
//     The exception is a handler.Enqueuer (EnqueueKey's and the other
//     helpers' into a queue that never blocks, a manager's sources): it is
//     given the events of each batch in one Enqueue call, on the
//     informer's goroutine, under its lock, as the batch is applied, and
//     must neither block nor call the informer or its Registration; so its
//     queue is locked and its workers woken once per batch rather than
//     per event, with no hand-off and no allocation per event.
//   - The processing goroutine pops up to 64 keys from the FIFO at once
//     (deltafifo.FIFO.PopBatch) and applies them under one lock; a relist
//     part or a bookmark is applied on its own, as it comes.
//   - A handler added late first gets the cached objects as OnAdd(obj, true),
//     synced or not (halfway through a paged first list, the pages already
//     cached, then the rest); each Registration has its own HasSynced, true
//     once the handler has returned from every initial-list notification.
//     A removed handler, or every handler once Run's context ends, hears
//     nothing after the call in progress: what it had pending is dropped,
//     and Run returns once those calls did.
//   - A panicking handler is recovered, logged with its stack and counted;
//     it and every other handler go on receiving events, the next at once
//     (client-go's listener pauses a second after a panic).
//   - A delete of a key the cache does not hold, with nothing queued for
//     it, notifies nobody, as client-go's FIFO drops it. An object created
//     and deleted while its key waited in the FIFO is told as an add then
//     a delete (see package deltafifo for the bound on a burst of
//     re-creations).
//   - Per-handler resync replays the cache as OnUpdate(obj, obj) every
//     HandlerOptions.ResyncPeriod, with no minimum (client-go raises a
//     period under a second to one second); it never relists.
//   - A transform runs once per object before caching; managedFields are
//     stripped by default.
//   - Cached objects are shared and read-only. In test binaries a write into
//     one is detected (when the object is replaced or deleted, and when Run
//     returns) and reported with the object and the changed fields; see
//     FactoryOptions.DetectMutations.
//   - With Options.Snapshot (a Factory's FactoryOptions.Snapshots), the
//     cache survives restarts: written at shutdown and every Interval, and
//     at the next Run loaded and resumed when it is of what the informer
//     watches and the server still has the history after it; otherwise a
//     cold start, whose reason Start reports (see Snapshot).
//
// Factory shares one informer per resource and namespace between
// controllers; its WaitForCacheSync names the cause of a cache that cannot
// sync (403 Forbidden, resource not found) instead of timing out silently.
//
// Concurrency contract: every method is safe for concurrent use. New starts
// nothing; Run starts the reflector, one goroutine popping the FIFO (the
// cache's only writer) and one goroutine per handler, and returns only after
// all of them have exited. No handler, transform or user function runs under
// a lock of the FIFO; index functions and inline key handlers run while the
// informer holds its own lock (which only handler registration and resync
// also take), so that a
// late handler's snapshot of the cache and the notifications that follow it
// line up exactly.
package informer
