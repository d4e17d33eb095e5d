package perturb

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A moment's watch that ends is opened again, and its events still count;
// the end of the context stops it.
func TestWatchMoment_opensAnEndedWatchAgainAndStopsAtTheEnd(t *testing.T) {
	fakes := make(chan *watch.FakeWatcher, 2)
	m := Moment{Name: "added", When: func(ev watch.Event) bool { return ev.Type == watch.Added },
		Watch: func(context.Context, Env) (watch.Interface, error) {
			w := watch.NewFake()
			fakes <- w
			return w, nil
		}}
	ctx, cancel := context.WithCancel(t.Context())
	first, _ := m.Watch(ctx, Env{})
	seen := make(chan watch.Event, 4)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		(&fleet{}).watchMoment(ctx, m, first, func(ev watch.Event) { seen <- ev })
	}()
	w1 := <-fakes
	w1.Add(&corev1.ConfigMap{})
	w1.Modify(&corev1.ConfigMap{}) // not the moment
	if ev := <-seen; ev.Type != watch.Added {
		t.Fatalf("got %s, want the Added event", ev.Type)
	}
	w1.Stop() // the server ends the watch
	w2 := <-fakes
	w2.Add(&corev1.ConfigMap{})
	if ev := <-seen; ev.Type != watch.Added {
		t.Fatalf("after the watch was opened again: got %s, want Added", ev.Type)
	}
	cancel()
	<-ended
	if !w2.IsStopped() {
		t.Error("the watch open at the end was not stopped")
	}
}
