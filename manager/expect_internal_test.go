package manager

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// neverLW is a ListerWatcher this test never runs.
type neverLW struct {
	reflector.ListerWatcher[*corev1.ConfigMap]
}

// Only a For source whose every object is a key of the controller's tells
// the controller's queue how many keys a first list brings: a filter may
// drop most of them, and an owned or watched object maps to other keys.
func TestSource_onlyAnUnfilteredForTellsItsQueueHowManyKeysAreComing(t *testing.T) {
	inf, err := informer.New[*corev1.ConfigMap](neverLW{}, informer.Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New[object.ObjectName](controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
		controller.Options[object.ObjectName]{})
	if err != nil {
		t.Fatal(err)
	}
	accept := func(*corev1.ConfigMap) bool { return true }
	mapped := func(*corev1.ConfigMap) []object.ObjectName { return nil }
	for _, tc := range []struct {
		name   string
		src    Source
		expect bool
	}{
		{"For", For(inf), true},
		{"For with a filter", For(inf, accept), false},
		{"Owns", Owns(inf), false},
		{"Watches", Watches(inf, mapped), false},
	} {
		var h handler.Handler[*corev1.ConfigMap] = handler.Funcs[*corev1.ConfigMap]{}
		got := tc.src.(*source[*corev1.ConfigMap]).expectingKeys(h, c)
		e, ok := got.(handler.KeyExpecter)
		if ok != tc.expect {
			t.Errorf("%s: a KeyExpecter is %v, want %v", tc.name, ok, tc.expect)
		}
		if ok {
			e.ExpectKeys(10_000) // reaches the controller's queue; must not block
		}
	}
}
