// Package handler is stage 5 of the pipeline (step 6 of the client-go
// diagram): the resource event handlers an informer calls, and the helpers
// that turn events into work-queue keys (step 7).
//
// Input: typed notifications from an informer, OnAdd, OnUpdate and OnDelete,
// where OnDelete receives an object.Deleted tombstone (the key, the last
// known object if any, and whether the final state is unknown). Output:
// whatever the handler does, usually adding keys to a queue through the
// tiny Adder interface (of the work queue it uses only the LowPriority
// constant).
//
// One path takes keys into a queue: Enqueue with a KeyFunc (Keys, Names,
// Owners, Mapped), behind EnqueueKey, EnqueueObject, EnqueueOwner and
// EnqueueMapped and a manager's For, Owns and Watches alike. Into a queue
// that never blocks (a NonBlockingAdder: workqueue.Queue,
// controller.Controller) its handler is an Enqueuer, which the informer
// hands each batch of events (Event: the call and the key, computed once)
// in one call, and which adds their keys in one batch per run of equal
// priority (AddBatch), allocating nothing per event.
//
// Concurrency contract: the informer calls each registered handler from one
// goroutine of its own, in order, never concurrently with itself, and never
// while holding a lock of the pipeline; the exception is an Enqueuer, which
// the informer calls on its own goroutine under its lock. Funcs and
// Filtering add no state of their own: they are as safe for concurrent use
// as the functions they wrap; the Enqueue helpers are as safe as their
// Adder.
package handler
