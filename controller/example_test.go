package controller_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctrlkit/ctrlkit/controller"
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
