package manager

import (
	"context"
	"errors"
	"testing"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/object"
)

// A starter starts what it holds once it runs, not what was dropped or
// removed meanwhile (a standby's controllers, removed before it led); a
// removed controller's error is not the starter's.
func TestStarter_startsOnlyWhatWasNotDroppedOrRemoved(t *testing.T) {
	newEntry := func(name string, run func(context.Context) error) controllerEntry {
		c, err := controller.New(controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
			return controller.Result{}, nil
		}), controller.Options[object.ObjectName]{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return controllerEntry{c: c, run: run, life: &controllerLife{}}
	}
	s := newStarter()
	ran := map[string]bool{}
	started := make(chan string, 3)
	runs := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			started <- name
			<-ctx.Done()
			return errors.New(name + " stopped")
		}
	}
	dropped, removed, kept := newEntry("dropped", runs("dropped")), newEntry("removed", runs("removed")), newEntry("kept", runs("kept"))
	for _, e := range []controllerEntry{dropped, removed, kept} {
		s.add(e)
	}
	s.drop(dropped.c)
	if err := removed.life.stop(); err != nil {
		t.Fatal(err)
	}
	if len(s.pending) != 2 {
		t.Fatalf("%d pending after drop, want 2", len(s.pending))
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	ran[<-started] = true
	late := newEntry("late", runs("late"))
	s.add(late)
	ran[<-started] = true
	if err := late.life.stop(); err != nil && err.Error() != "late stopped" {
		t.Errorf("stop = %v", err)
	}
	cancel()
	if err := <-done; err == nil || err.Error() != "kept stopped" {
		t.Errorf("run = %v; want the kept controller's error only", err)
	}
	if !ran["kept"] || !ran["late"] || len(ran) != 2 {
		t.Errorf("started %v; want kept and late only", ran)
	}
}
