package manager

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
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
		k := tc.src.(*source[*corev1.ConfigMap]).keysInto(c, gvk, nil, "test")
		if k.expect != tc.expect {
			t.Errorf("%s: passes the hint on: %v, want %v", tc.name, k.expect, tc.expect)
		}
		k.ExpectKeys(10_000) // reaches the controller's queue, or nothing; must not block
	}
}

func cmAt(name, rv string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, Labels: labels,
		UID: types.UID("uid-" + name)}}
}

// A source's one path: the filter turns crossings into adds and deletes
// and drops the rest, each key carries the informer's event as its reason,
// background work is queued behind the rest, and a For source under a
// partition remembers the UIDs of deleted objects.
func TestSource_EnqueueRunsEveryStageInOneBatch(t *testing.T) {
	inf, err := informer.New[*corev1.ConfigMap](neverLW{}, informer.Options[*corev1.ConfigMap]{Name: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New[object.ObjectName](controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
		controller.Options[object.ObjectName]{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Queue().ShutDown()
	in := map[string]string{"in": "yes"}
	accept := func(cm *corev1.ConfigMap) bool { return cm.Labels["in"] == "yes" }
	p := &partition{}
	k := For(inf, accept).(*source[*corev1.ConfigMap]).keysInto(c, corev1.SchemeGroupVersion.WithKind("ConfigMap"), p, inf.Name())
	type ev = handler.Event[*corev1.ConfigMap]
	same := cmAt("resynced", "1", in)
	k.Enqueue([]ev{
		{Type: handler.AddEvent, Key: "ns/listed", Obj: cmAt("listed", "1", in), Initial: true},
		{Type: handler.UpdateEvent, Key: "ns/resynced", Old: same, Obj: same},
		{Type: handler.UpdateEvent, Key: "ns/left", Old: cmAt("left", "1", in), Obj: cmAt("left", "2", nil)},
		{Type: handler.UpdateEvent, Key: "ns/outside", Old: cmAt("outside", "1", nil), Obj: cmAt("outside", "2", nil)},
		{Type: handler.UpdateEvent, Key: "ns/entered", Old: cmAt("entered", "1", nil), Obj: cmAt("entered", "2", in)},
		{Type: handler.DeleteEvent, Key: "ns/gone", Deleted: object.Deleted[*corev1.ConfigMap]{
			Name: object.ObjectName{Namespace: "ns", Name: "gone"}, Obj: cmAt("gone", "3", in), HasObj: true}},
	})
	for name, want := range map[string]struct {
		event    string
		position int
	}{
		"left": {"update", 0}, "entered": {"update", 1}, "gone": {"delete", 2},
		"listed": {"initial list", 3}, "resynced": {"resync", 4},
	} {
		st := c.KeyStats(object.ObjectName{Namespace: "ns", Name: name})
		if !st.Queue.Queued || st.Queue.Position != want.position || st.Last.Event != want.event ||
			st.Last.Source != "configmaps" || st.Adds != 1 {
			t.Errorf("%s: queued %v at %d, last reason %q of %q, %d adds; want queued at %d, %q of configmaps, 1 add",
				name, st.Queue.Queued, st.Queue.Position, st.Last.Event, st.Last.Source, st.Adds, want.position, want.event)
		}
	}
	if st := c.KeyStats(object.ObjectName{Namespace: "ns", Name: "outside"}); st.Queue.Queued || st.Adds != 0 {
		t.Errorf("an update outside the filter was queued: %+v", st)
	}
	if g, ok := p.gone[object.ObjectName{Namespace: "ns", Name: "gone"}]; !ok || g.uid != "uid-gone" {
		t.Errorf("the partition remembers %+v for the deleted object, want its UID", p.gone)
	}
	if g, ok := p.gone[object.ObjectName{Namespace: "ns", Name: "left"}]; !ok || g.uid != "uid-left" {
		t.Errorf("the partition remembers %+v for the object that left the filter, want its UID", p.gone)
	}
}

// Without a tracer, the source's path costs no allocation per event: no
// cause is built and no link kept (the tracing of issue 53 is free when
// off). With one, each event's cause is kept for the reconcile's span.
func TestSource_EnqueueAllocatesNothingWithoutATracer(t *testing.T) {
	inf, err := informer.New[*corev1.ConfigMap](neverLW{}, informer.Options[*corev1.ConfigMap]{Name: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New[object.ObjectName](controller.ReconcileFunc[object.ObjectName](
		func(context.Context, object.ObjectName) (controller.Result, error) { return controller.Result{}, nil }),
		controller.Options[object.ObjectName]{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Queue().ShutDown()
	k := For(inf).(*source[*corev1.ConfigMap]).keysInto(c, corev1.SchemeGroupVersion.WithKind("ConfigMap"), nil, inf.Name())
	type ev = handler.Event[*corev1.ConfigMap]
	events := make([]ev, 64)
	for i := range events {
		name := fmt.Sprint("cm-", i)
		events[i] = ev{Type: handler.UpdateEvent, Key: "ns/" + name, Old: cmAt(name, "1", nil), Obj: cmAt(name, "2", nil)}
	}
	k.Enqueue(events) // the keys' first add grows the queue's and the tracker's maps
	if a := testing.AllocsPerRun(100, func() { k.Enqueue(events) }); a != 0 {
		t.Errorf("Enqueue of %d events without a tracer: %v allocations, want 0", len(events), a)
	}
	if c.Tracing() || len(k.causes) != 0 {
		t.Errorf("causes were built without a tracer: %d", len(k.causes))
	}
}
