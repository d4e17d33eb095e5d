// Package logctx carries a logger in a context: a controller puts its own
// in each reconcile's context, and what a reconcile calls (controller.
// LoggerFrom, apply's warnings) logs there instead of on the default
// logger, under the controller's name.
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

// From returns the logger ctx carries, or slog.Default() when it carries
// none.
func From(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(key{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
