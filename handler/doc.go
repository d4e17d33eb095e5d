// Package handler is stage 5 of the pipeline (step 6 of the client-go
// diagram): the resource event handlers an informer calls, and the helpers
// that turn events into work-queue keys (step 7).
//
// Input: typed notifications from an informer, OnAdd, OnUpdate and OnDelete,
// where OnDelete receives an object.Deleted tombstone (the key, the last
// known object if any, and whether the final state is unknown). Output:
// whatever the handler does, usually EnqueueKey adding "namespace/name" to a
// queue through the tiny Adder interface, so this package does not import
// the work queue.
//
// Concurrency contract: the informer calls each registered handler from one
// goroutine of its own, in order, never concurrently with itself, and never
// while holding a lock of the pipeline; the exception is an inline key
// handler (InlineKeyHandler, such as EnqueueKey's into a queue that never
// blocks), which the informer calls on its own goroutine under its lock. The adapters here add no state of
// their own: Funcs and Filtering are as safe for concurrent use as the
// functions they wrap, and EnqueueKey is as safe as its Adder.
package handler
