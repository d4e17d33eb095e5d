package run_test

import (
	"errors"
	"testing"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/manager"
)

func TestErrStarted_isOneValueInEveryPackage(t *testing.T) {
	for name, err := range map[string]error{
		"controller": controller.ErrStarted, "election": election.ErrStarted,
		"informer": informer.ErrStarted, "manager": manager.ErrStarted,
	} {
		if !errors.Is(err, run.ErrStarted) {
			t.Errorf("%s.ErrStarted = %v, not run.ErrStarted", name, err)
		}
	}
}

func TestOnce_startsOnceAndRefusesLaterChanges(t *testing.T) {
	var o run.Once
	if err := o.Before("add"); err != nil || o.Started() {
		t.Fatalf("before Start: Before = %v, Started = %v", err, o.Started())
	}
	if err := o.Start("thing"); err != nil {
		t.Fatalf("first Start = %v", err)
	}
	err := o.Start("thing")
	if !errors.Is(err, run.ErrStarted) || err.Error() != "thing: already started" {
		t.Errorf("second Start = %v, want \"thing: already started\" wrapping ErrStarted", err)
	}
	if err := o.Before("add"); !errors.Is(err, run.ErrStarted) || !o.Started() {
		t.Errorf("after Start: Before = %v, Started = %v", err, o.Started())
	}
}
