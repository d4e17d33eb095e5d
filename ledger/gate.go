package ledger

import (
	"context"
	"time"

	"github.com/ctrlkit/ctrlkit/object"
)

// Gate is the ledger as a controller's gate (controller.Options.Gate): a
// key waits while the caches have not applied the writes made for it, and
// each reconcile's writes are recorded for its key.
type Gate struct{ l *Ledger }

// Gate returns l as a controller gate.
func (l *Ledger) Gate() Gate { return Gate{l: l} }

// Wait reports whether key must wait for the caches, and for at most how long.
func (g Gate) Wait(key object.ObjectName) (bool, time.Duration) { return g.l.Wait(key) }

// Context returns ctx carrying key as the owner of the writes made with it.
func (g Gate) Context(ctx context.Context, key object.ObjectName) context.Context {
	return WithOwner(ctx, key)
}
