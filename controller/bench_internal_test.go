package controller

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkController_process is what the controller adds to a reconcile
// that does nothing: a key added, handed out and reconciled by one
// goroutine, the queue's work included.
func BenchmarkController_process(b *testing.B) {
	rec := ReconcileFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil })
	c, err := New[string](rec, Options[string]{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.queue.ShutDown()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "ns/obj-" + strconv.Itoa(i)
	}
	ctx := b.Context()
	for i := 0; b.Loop(); i++ {
		c.queue.Add(keys[i%len(keys)])
		key, shutdown := c.queue.Get()
		if shutdown {
			b.Fatal("queue shut down")
		}
		c.process(ctx, key)
	}
}
