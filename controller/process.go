package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ctrlkit/ctrlkit/internal/logctx"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// terminalError marks an error that retrying cannot fix.
type terminalError struct{ err error }

func (e terminalError) Error() string { return "terminal: " + e.err.Error() }
func (e terminalError) Unwrap() error { return e.err }

// Terminal wraps err so the controller does not retry the key: a retry
// cannot fix it (an invalid spec, say) and the next change to the object
// queues the key again anyway. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

// IsTerminal reports whether err, or an error it wraps, came from Terminal.
func IsTerminal(err error) bool {
	var t terminalError
	return errors.As(err, &t)
}

// ErrReconcileTimeout is the cause of a reconcile context that ran out of
// Options.ReconcileTimeout (see context.Cause).
var ErrReconcileTimeout = errors.New("controller: reconcile timed out")

// errPanic wraps a recovered panic.
type errPanic struct {
	value any
	stack []byte
}

func (e errPanic) Error() string { return fmt.Sprintf("controller: reconcile panicked: %v", e.value) }

// process reconciles one key, as worker (its slot in the tracker), and
// applies the retry policy. The caller marks key done in the queue.
func (c *Controller[K]) process(ctx context.Context, key K, worker int) {
	c.track.started(key, worker)
	var span trace.Span
	if c.opts.Tracer != nil {
		ctx, span = c.startSpan(ctx, key)
	}
	start := time.Since(c.track.epoch) // as in tracker.now: one read of the monotonic clock
	res, err := c.reconcile(logctx.WithKey(ctx, key), key)
	end := time.Since(c.track.epoch)
	c.metrics.duration(end-start, exemplar(span))
	if span != nil {
		endSpan(span, res, err)
	}
	ended := c.track.time(end) // dates the outcome and any requeue below
	attempt := 0               // the key's failures in a row, this one included
	if err != nil {
		attempt = c.queue.NumRequeues(key) + 1
	}
	// The outcome is told last, after the retry or requeue below is noted:
	// whoever sees the error (Stats, KeyStats, /debug/ctrlkit) sees why the
	// key comes back too.
	defer c.track.finished(key, worker, err, attempt, ended)
	switch {
	case err == nil:
		c.queue.Forget(key)
		c.metrics.succeeded(res.RequeueAfter > 0)
		if res.RequeueAfter > 0 {
			c.requeue(key, "requeue after", ended, res.RequeueAfter, res.Priority, spanContext(span))
		}
	case IsTerminal(err):
		c.queue.Forget(key)
		c.metrics.failed(true)
		c.opts.Logger.Error("controller: reconcile failed; not retrying", "key", key, "err", err)
	case c.opts.MaxRetries > 0 && c.queue.NumRequeues(key) >= c.opts.MaxRetries:
		c.queue.Forget(key)
		c.metrics.failed(false)
		c.metrics.drop(dropMaxRetries)
		c.opts.Logger.Error("controller: reconcile failed too often; dropping the key", "key", key,
			"retries", c.opts.MaxRetries, "err", err)
	default:
		c.metrics.failed(false)
		c.opts.Logger.Warn("controller: reconcile failed; retrying with backoff", "key", key, "err", err)
		c.track.retries.Add(1)
		c.track.noteAfter(key, Reason{Event: "retry after error", At: ended}, spanContext(span))
		c.queue.AddWithOpts(key, workqueue.AddOpts{RateLimited: true, Priority: res.Priority})
	}
}

// reconcile calls the Reconciler with the key's own context and turns a
// panic into an error. ctx is Run's work context, which outlives Run's.
func (c *Controller[K]) reconcile(ctx context.Context, key K) (res Result, err error) {
	rctx := ctx
	if c.opts.Gate != nil {
		rctx = c.opts.Gate.Context(rctx, key)
	}
	if c.opts.ReconcileTimeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(rctx, c.opts.ReconcileTimeout, ErrReconcileTimeout)
		defer cancel()
		defer func() {
			if rctx.Err() == context.DeadlineExceeded && context.Cause(rctx) == ErrReconcileTimeout {
				c.metrics.timedOut()
			}
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			p := errPanic{value: v, stack: debug.Stack()}
			c.metrics.panicked()
			c.track.panics.Add(1)
			c.opts.Logger.Error("controller: reconcile panicked", "key", key, "panic", v, "stack", string(p.stack))
			res, err = Result{}, p
		}
	}()
	return c.rec.Reconcile(rctx, key)
}

// spanContext returns span's context, the zero one without a span.
func spanContext(span trace.Span) trace.SpanContext {
	if span == nil {
		return trace.SpanContext{}
	}
	return span.SpanContext()
}
