package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
)

// An event recorded while the manager runs reaches the API server, from
// the recorder's component; events recorded while it stops are sent or
// dropped without a word: the broadcaster used to stop with Run's context
// before the recorders knew, and client-go logged an error for each
// event handed to it then.
func TestManager_eventsReachTheServerAndThoseRecordedWhileItStopsLogNothing(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs lines
	opts := quiet(t)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := m.EventRecorder("events-test")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()

	eventually(t, 30*time.Second, "the event recorded while running, on the server", func() bool {
		rec.Event(cm, corev1.EventTypeNormal, "Running", "recorded while the manager runs")
		evs, err := kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Running"})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Source.Component == "events-test" &&
			evs.Items[0].InvolvedObject.UID == cm.UID
	})

	// Events keep coming, about one a millisecond (below the
	// broadcaster's queue of 1,000, so none is dropped for being too
	// many), from before the stop until after Run returned.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	recorded := 0
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond) // pacing the events, not synchronisation
		defer tick.Stop()
		for {
			rec.Event(cm, corev1.EventTypeNormal, "Stopping", fmt.Sprintf("event %d", recorded))
			recorded++
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	// Some events recorded before the stop reach the server first.
	eventually(t, 30*time.Second, "events recorded before the stop, on the server", func() bool {
		evs, err := kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Stopping"})
		return err == nil && len(evs.Items) > 0
	})
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	close(stop)
	wg.Wait()
	for _, text := range []string{"Unable to record event", "Unable to write event", "broadcaster"} {
		if got := logs.with(text); len(got) > 0 {
			t.Errorf("%d log lines with %q while the manager stopped (%d events recorded), the first: %s",
				len(got), text, recorded, got[0])
		}
	}
}
