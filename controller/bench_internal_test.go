package controller

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// benchController returns a controller whose reconciler does nothing,
// never run (the benchmark plays its worker), and 1024 keys to add.
func benchController(b *testing.B, opts Options[string]) (*Controller[string], []string) {
	b.Helper()
	opts.Name = "bench"
	c, err := New[string](ReconcileFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil }), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.queue.ShutDown)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "ns/obj-" + strconv.Itoa(i)
	}
	return c, keys
}

// BenchmarkController_process is what the controller adds to a reconcile
// that does nothing: a key added, handed out and reconciled by one
// goroutine, the queue's work included; with metrics registered, as a
// manager's controllers have them, and without.
func BenchmarkController_process(b *testing.B) {
	for _, metrics := range []bool{false, true} {
		b.Run("metrics="+strconv.FormatBool(metrics), func(b *testing.B) {
			var opts Options[string]
			if metrics {
				opts.Telemetry = telemetry.Telemetry{Registerer: prometheus.NewRegistry()}
			}
			c, keys := benchController(b, opts)
			ctx := b.Context()
			for i := 0; b.Loop(); i++ {
				c.queue.Add(keys[i%len(keys)])
				key, shutdown := c.queue.Get()
				if shutdown {
					b.Fatal("queue shut down")
				}
				c.process(ctx, key, 0)
				c.queue.Done(key)
			}
		})
	}
}

// BenchmarkController_add is an add of a key not yet queued, with a reason
// (as a manager's sources add keys, for KeyStats) and without, the get and
// done that take it out again included.
func BenchmarkController_add(b *testing.B) {
	for _, reason := range []bool{false, true} {
		b.Run("reason="+strconv.FormatBool(reason), func(b *testing.B) {
			c, keys := benchController(b, Options[string]{})
			r := Reason{Event: "update", Source: "configmaps"}
			for i := 0; b.Loop(); i++ {
				k := keys[i%len(keys)]
				if reason {
					c.AddBecause(k, r)
				} else {
					c.Add(k)
				}
				key, _ := c.queue.Get()
				c.track.started(key, 0)
				c.track.finished(key, 0, nil, 0, time.Time{})
				c.queue.Done(key)
			}
		})
	}
}
