package reflector

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// waitStats polls r.Stats until cond holds, for at most 10s.
func waitStats(t *testing.T, r *Reflector[*corev1.Pod], what string, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := r.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never showed %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond) // polling another goroutine's observable state
	}
}

func TestReflector_statsTellTheModeTheRelistsAndTheirCausesTheWatchAndTheErrors(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")), failing(errors.New("connection reset")), page("20", pod("b", "15")))
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true})
	if st := r.Stats(); st.Mode != "" || st.Syncs != 0 || !st.WatchSince.IsZero() {
		t.Fatalf("stats before Run = %+v, want zero", st)
	}
	runReflector(t, r)
	w := lw.nextWatch(t)
	st := waitStats(t, r, "the first sync and an open watch", func(st Stats) bool { return !st.WatchSince.IsZero() })
	if st.Mode != ModePaginated || st.Syncs != 1 || st.LastSyncCause != "" || st.LastSync.IsZero() || st.ResourceVersion != "10" {
		t.Errorf("after the first sync: %+v", st)
	}
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus) // relist: fails once, then succeeds
	lw.nextWatch(t)
	st = waitStats(t, r, "the relist after the failed list", func(st Stats) bool {
		return st.ResourceVersion == "20" && !st.WatchSince.IsZero()
	})
	if st.Syncs != 3 || st.ListErrors != 1 || st.WatchErrors != 1 || !strings.Contains(st.LastError, "connection reset") ||
		st.LastErrorAt.IsZero() || !strings.Contains(st.LastSyncCause, "connection reset") {
		t.Errorf("after a 410 and a failed relist: %+v", st)
	}
}

func TestReflector_statsShowWatchList(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(failing(errors.New("list must not be called")))
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{})
	runReflector(t, r)
	w := lw.nextWatch(t)
	w.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	st := waitStats(t, r, "the stream's end", func(st Stats) bool { return st.ResourceVersion == "10" })
	if st.Mode != ModeWatchList || st.Syncs != 1 || st.WatchSince.IsZero() {
		t.Errorf("stats = %+v, want one watch-list sync with its watch open", st)
	}
}
