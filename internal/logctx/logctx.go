// Package logctx carries a logger in a context: a controller puts its own
// in each reconcile's context, with the key being reconciled, and what a
// reconcile calls (controller.LoggerFrom, apply's warnings) logs there
// instead of on the default logger, under the controller's name and the
// key.
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns ctx carrying l.
func With(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, key{}, l)
}

// keyOf is the context key of the key being reconciled.
type keyOf struct{}

// keyCtx carries the key being reconciled without boxing it: a reconcile
// pays one small allocation for it, and the boxing only happens when a
// logger is asked for.
type keyCtx[K any] struct {
	context.Context
	key K
}

func (c *keyCtx[K]) Value(k any) any {
	if _, ok := k.(keyOf); ok {
		return c.key
	}
	return c.Context.Value(k)
}

// WithKey returns ctx carrying the key being reconciled, which From adds
// to the logger it returns.
func WithKey[K any](ctx context.Context, key K) context.Context {
	return &keyCtx[K]{Context: ctx, key: key}
}

// From returns the logger ctx carries, or slog.Default() when it carries
// none, with the attribute key=KEY when ctx is a reconcile's (WithKey).
func From(ctx context.Context) *slog.Logger {
	l, ok := ctx.Value(key{}).(*slog.Logger)
	if !ok || l == nil {
		l = slog.Default()
	}
	if k := ctx.Value(keyOf{}); k != nil {
		return l.With("key", k)
	}
	return l
}
