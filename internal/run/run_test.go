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
