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
// Run returns only after every goroutine it started has exited: when its
// context ends, workers stop taking keys, in-flight reconciles finish, and
// keys still queued are left unprocessed.
package controller
