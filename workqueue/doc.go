// Package workqueue is stage 7–8 of the controller pipeline: the queue
// between resource event handlers, which enqueue keys, and the workers that
// process them.
//
//	handlers ──Add / AddAfter / AddRateLimited / AddWithOpts(key)──> Queue ──Get──> worker ──Done(key)
//
// Input: keys (any comparable type, usually "namespace/name" strings).
// Output: the same keys, handed to workers one at a time.
//
// # Guarantees
//
//   - A key waits at most once: adding a queued key again does nothing.
//   - A key is never held by two workers at once.
//   - A key added while a worker holds it is queued again when the worker
//     calls Done, so no change is missed.
//   - Keys are handed out highest priority first; within a priority, in
//     the order they were first queued, except that a flow (a namespace by
//     default) that has had Options.Quantum keys (4) in a round waits for
//     the next round. With only Add and one namespace, that is plain first
//     in, first out.
//   - No priority starves: a band whose oldest key has waited its aging
//     bound takes turns with the highest band (see AddOpts.Priority).
//   - After ShutDown, adds are ignored, the keys still queued are handed
//     out, and then Get reports shutdown. ShutDownWithDrain also waits,
//     bounded by a context, until every key has been handed out and is Done.
//
// # Priorities, fairness and aging
//
// AddWithOpts adds a key at a priority (AddOpts.Priority; Add is 0,
// LowPriority is for an informer's initial list and resyncs), after a
// delay, or rate limited. A key already waiting keeps the higher priority
// and the earlier time. Within a priority, Options.FlowKey names each key's
// flow (default: its namespace), and keys go out in rounds: in arrival
// order, up to Options.Quantum keys of each flow a round, so a namespace
// with 100,000 queued keys delays another namespace's first key by at most
// 4 keys (8 if that namespace had its share of the round already), not
// 100,000. Options.MaxInFlight caps the keys of one flow being processed:
// a flow at its cap sits out until one of its keys is Done, which keeps
// workers free for the other flows (a quiet flow's key then waits for no
// reconcile to end). Across priorities the highest band goes first, but a lower band
// q takes turns with the highest band p once its oldest key has waited
// (p - q) * Options.AgingStep (100ms by default: 10s for LowPriority under
// a priority-0 load). Bands reports the bands waiting; with metrics on,
// workqueue_band_depth and workqueue_band_oldest_seconds report them by
// priority (at most 8 label values; the rest as "other").
//
// # Delays and rate limiting
//
// AddAfter adds a key once a delay has passed; if the key is already
// waiting, the earlier time wins. AddRateLimited asks the queue's
// RateLimiter how long a failing key should wait (per-key exponential
// backoff and an overall token bucket by default); Forget clears a key's
// failures once it succeeds. Limiters are plain values that take the time as
// an argument, so they are tested without clocks.
//
// # Concurrency and goroutines
//
// Every Queue method is safe for concurrent use. Get blocks; the other
// methods do not (AddAfter appends to an unbounded intake instead of
// sending to the delay goroutine). ShutDownWithDrain blocks until drained or
// until its context ends.
//
// New starts no goroutine. The one goroutine a Queue may own is the delay
// goroutine, which owns the heap of delayed keys and a single timer armed for
// the earliest of them (never ticking while nothing is delayed). It starts on
// the first AddAfter or AddRateLimited that must wait, and ShutDown or
// ShutDownWithDrain stop it and wait for it to exit; keys still delayed are
// dropped. So: every queue that was given a delayed key must be shut down.
// This keeps the common API to New, Add, Get, Done, ShutDown, with no Run
// method to forget, while the goroutine is still owned and joined.
//
// # Metrics
//
// With Options.Registerer set, the queue registers the work queue metrics
// under the names, labels and buckets controller-runtime uses, so its
// dashboards and alerts work unchanged: workqueue_depth,
// workqueue_adds_total, workqueue_queue_duration_seconds,
// workqueue_work_duration_seconds, workqueue_unfinished_work_seconds,
// workqueue_longest_running_processor_seconds and workqueue_retries_total,
// each labelled name=Options.Name and controller=Options.Name (the queue of
// a controller takes the controller's name). client-go's own queues use the
// same names with the "name" label only. workqueue_depth is the queue's
// total; it has no "priority" label, the split by priority is
// workqueue_band_depth. The gauges are computed when scraped, so no goroutine updates them.
// Without a registry the queue does not even read Options.Clock on Add, Get
// and Done (while keys of one priority wait); Get reads the system's
// monotonic clock once (twice if it waited for a key), to decide whether to
// yield its processor (see Get).
package workqueue
