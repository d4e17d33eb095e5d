package informer_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/informer"
)

func TestInformer_resyncReplaysTheCacheToItsHandlerWithoutRelisting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a", "b")
		inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
		resynced, quiet := newMirror(), newMirror()
		register(t, inf, resynced, "resynced", time.Minute)
		register(t, inf, quiet, "quiet", 0)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		if !inf.HasSynced() {
			t.Fatal("not synced once every goroutine is idle")
		}

		time.Sleep(time.Minute + time.Second) // fake time: one resync period
		synctest.Wait()
		want := []string{"add a@1 initial=true", "add b@2 initial=true", "update a@1->1", "update b@2->2"}
		got := resynced.callList()
		slices.Sort(got[2:])
		if !slices.Equal(got, want) {
			t.Errorf("resynced handler heard %q, want %q", got, want)
		}
		if n := len(quiet.callList()); n != 2 {
			t.Errorf("handler without resync heard %d calls, want the 2 initial adds", n)
		}
		srv.mu.Lock()
		lists := srv.lists
		srv.mu.Unlock()
		if lists != 1 {
			t.Errorf("%d lists, want 1: resync must not relist", lists)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
