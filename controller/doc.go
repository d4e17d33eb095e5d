// Package controller is steps 8 and 9 of the pipeline: workers take keys
// from a work queue and reconcile each one, reading the latest object from
// the cache.
//
//	handlers ──Add(key)──> Controller's queue ──Get──> worker ──Reconcile(ctx, key)──> Result / error
//
// The rules a reconciler can rely on:
//
//   - Workers start only after every cache the controller waits for has
//     synced (WaitFor), so a reconciler never acts on a half-filled cache.
//   - A key is never reconciled by two workers at once, and a key that
//     changes while it is being reconciled is reconciled again afterwards.
//   - Success forgets the key's failures. An error requeues it with the
//     rate limiter (per-key exponential backoff, 5ms to 1000s, under an
//     overall 10 qps, burst 100), unless it is Terminal, or the key has
//     failed MaxRetries times (then it is dropped with a log line and a
//     metric). Result.RequeueAfter reconciles it again later.
//   - A panic in Reconcile is recovered, logged with its stack, counted, and
//     handled as an error.
//   - Each reconcile gets its own context: not cancelled when Run's context
//     ends, so in-flight work finishes; bounded by ReconcileTimeout when set,
//     with a cause that tells a timeout from anything else.
//
// # Metrics
//
// With a Registerer, a controller registers its series under
// controller-runtime's names, labels and buckets, labelled
// controller=Options.Name, so dashboards and alerts written for
// controller-runtime work unchanged; ctrlkit does not register a second,
// ctrlkit-named copy of them:
//
//   - controller_runtime_reconcile_total{result}: success, requeue_after
//     (succeeded with RequeueAfter), error (an error, terminal or not, or a
//     panic); requeue is always 0, as ctrlkit has no Requeue flag.
//   - controller_runtime_reconcile_errors_total,
//     controller_runtime_terminal_reconcile_errors_total,
//     controller_runtime_reconcile_panics_total (panics count as errors
//     too) and controller_runtime_reconcile_timeouts_total
//     (ReconcileTimeout ran out).
//   - controller_runtime_reconcile_time_seconds (a histogram, 5ms to 60s),
//     controller_runtime_active_workers and
//     controller_runtime_max_concurrent_reconciles (Workers).
//
// What only ctrlkit does is named ctrlkit_controller_*:
// ctrlkit_controller_dropped_keys_total{reason} (max_retries: the key
// failed MaxRetries times; not_owned: another replica owns it, see
// Partition) and ctrlkit_controller_gate_holds_total (keys held back by
// the Gate). The queue's series are package workqueue's, with the same
// name.
//
// Run returns only after every goroutine it started has exited: when its
// context ends, workers stop taking keys, in-flight reconciles finish, and
// keys still queued are left unprocessed.
package controller
