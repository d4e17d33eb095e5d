package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// A controller whose reconciler fails once for one key: the key is retried
// with backoff, and the other keys are not held up.
func Example() {
	failed := false
	done := make(chan struct{})
	rec := controller.ReconcileFunc[string](func(_ context.Context, key string) (controller.Result, error) {
		if key == "default/flaky" && !failed {
			failed = true
			fmt.Println("reconcile", key, "failed")
			return controller.Result{}, errors.New("not ready")
		}
		fmt.Println("reconciled", key)
		if key == "default/flaky" {
			close(done)
		}
		return controller.Result{}, nil
	})
	c, err := controller.New[string](rec, controller.Options[string]{Name: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Add("default/flaky")
	c.Add("default/steady")

	ctx, cancel := context.WithCancel(context.TODO())
	ran := make(chan error)
	go func() { ran <- c.Run(ctx) }()
	<-done
	cancel()
	fmt.Println("run:", <-ran)
	// Output:
	// reconcile default/flaky failed
	// reconciled default/steady
	// reconciled default/flaky
	// run: <nil>
}

// A reconciler logs through its controller's logger, found in its context
// (as controller-runtime's log.FromContext): every line names the
// controller and the key being reconciled.
func ExampleLoggerFrom() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn, // the controller's own lines at Info are left out of this example
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output
			}
			return a
		}}))
	done := make(chan struct{})
	rec := controller.ReconcileFunc[string](func(ctx context.Context, key string) (controller.Result, error) {
		controller.LoggerFrom(ctx).Warn("the greeting is empty")
		close(done)
		return controller.Result{}, nil
	})
	c, err := controller.New[string](rec, controller.Options[string]{Name: "greeter",
		Telemetry: telemetry.Telemetry{Logger: logger}})
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Add("default/world")
	ctx, cancel := context.WithCancel(context.TODO())
	ran := make(chan error)
	go func() { ran <- c.Run(ctx) }()
	<-done
	cancel()
	<-ran
	fmt.Println(controller.LoggerFrom(context.TODO()) == slog.Default()) // outside a reconcile
	// Output:
	// level=WARN msg="the greeting is empty" controller=greeter key=default/world
	// true
}

// Workers wait for the caches a controller reads: with a channel closed
// once a cache has synced (an informer registration's Synced), they start
// the moment it closes; keys added meanwhile wait in the queue.
func ExampleController_WaitForSynced() {
	synced := make(chan struct{})
	done := make(chan struct{})
	rec := controller.ReconcileFunc[string](func(_ context.Context, key string) (controller.Result, error) {
		fmt.Println("reconciled", key)
		close(done)
		return controller.Result{}, nil
	})
	c, err := controller.New[string](rec, controller.Options[string]{Name: "waits"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c.WaitForSynced("configmaps", synced, nil)
	ctx, cancel := context.WithCancel(context.TODO())
	ran := make(chan error)
	go func() { ran <- c.Run(ctx) }()
	c.Add("default/a")
	fmt.Println("synced:", c.HasSynced())
	close(synced) // the informer's initial list is in
	<-done
	fmt.Println("synced:", c.HasSynced())
	cancel()
	fmt.Println("run:", <-ran)
	// Output:
	// synced: false
	// reconciled default/a
	// synced: true
	// run: <nil>
}
