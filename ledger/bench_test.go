package ledger_test

import (
	"context"
	"testing"

	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/object"
)

// The gate's cost per key handed to a worker, and per informer event, when
// no write is pending: what every key and event pays with ReadYourWrites on.
func BenchmarkGate_nothingPending(b *testing.B) {
	l, err := ledger.New(ledger.Options{})
	if err != nil {
		b.Fatal(err)
	}
	g := l.Gate()
	key := object.ObjectName{Namespace: "ns", Name: "a"}
	ctx := context.Background()
	for b.Loop() {
		if wait, _ := g.Wait(key); wait {
			b.Fatal("waits with nothing pending")
		}
		_ = g.Context(ctx, key)
		l.Observe(secrets, key)
	}
}
