package informer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// A handler added while the first list arrives page by page hears the
// pages already cached as initial adds, then the rest: as client-go's
// informer replays its indexer to a late handler, synced or not. A plain
// handler and an Enqueuer (a controller's queue) alike.
func TestInformer_aHandlerAddedHalfwayThroughAPagedFirstListHearsAllOfIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &pagedServer{fakeServer: newFakeServer("a", "b", "c")}
		gate := make(chan struct{})
		srv.onPage = func() { <-gate }
		opts := informer.Options[*corev1.ConfigMap]{}
		opts.Reflector.PageSize, opts.Reflector.DisableWatchList = 1, true
		inf := newInformer(t, srv, opts)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { _ = inf.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()
		synctest.Wait() // the first page is cached, the second waits
		if inf.Reader().Len() != 1 || inf.HasSynced() {
			t.Fatalf("setup: %d cached, synced %v; want the first page alone", inf.Reader().Len(), inf.HasSynced())
		}

		m := newMirror()
		plain := register(t, inf, m, "late", 0)
		q, err := workqueue.New(workqueue.Options[string]{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.ShutDown()
		queued, err := inf.AddEventHandler(handler.EnqueueKey[*corev1.ConfigMap](q, nil), informer.HandlerOptions{Name: "queue"})
		if err != nil {
			t.Fatal(err)
		}
		close(gate)
		synctest.Wait()
		if !inf.HasSynced() || !plain.HasSynced() || !queued.HasSynced() {
			t.Fatal("not synced once the last page is in")
		}
		want := []string{"add a@1 initial=true", "add b@2 initial=true", "add c@3 initial=true"}
		if got := m.callList(); !slices.Equal(got, want) {
			t.Errorf("the late handler heard %q, want %q", got, want)
		}
		var keys []string
		for q.Len() > 0 {
			k, _ := q.Get()
			keys = append(keys, k)
			q.Done(k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"ns/a", "ns/b", "ns/c"}) {
			t.Errorf("the late queue got %q, want every key", keys)
		}
	})
}

// Remove stops a handler: of what it had pending, it hears nothing after
// the call in progress; and an informer whose context ends returns once
// each handler's call in progress does, its backlog dropped.
func TestInformer_aRemovedOrStoppedHandlerHearsNothingAfterItsCallInProgress(t *testing.T) {
	for _, how := range []string{"removed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newFakeServer("first")
				inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
				release := make(chan struct{})
				var calls atomic.Int32
				h := handler.Funcs[*corev1.ConfigMap]{AddFunc: func(*corev1.ConfigMap, bool) {
					if calls.Add(1) == 1 {
						<-release // blocked in the first call
					}
				}, UpdateFunc: func(_, _ *corev1.ConfigMap) { calls.Add(1) }}
				reg, err := inf.AddEventHandler(h, informer.HandlerOptions{Name: "slow"})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				synctest.Wait()
				for i := range 50 {
					srv.create("more-"+string(rune('a'+i%26))+string(rune('a'+i/26)), nil)
				}
				synctest.Wait() // 50 adds pending behind the blocked call
				if how == "removed" {
					reg.Remove()
				} else {
					cancel()
				}
				synctest.Wait() // Run, stopping, waits for the call in progress
				close(release)
				synctest.Wait()
				if n := calls.Load(); n != 1 {
					t.Errorf("the handler heard %d calls, want only the one in progress when it was %s", n, how)
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// A relist dropped for a transform error is made again after a backoff,
// as client-go lists again when its store's Replace fails: one transient
// error on the first list delays the sync by a second, not for good.
func TestInformer_aFirstListDroppedByATransformErrorIsMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a", "b")
		var failed atomic.Bool
		inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{Transform: func(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			if failed.CompareAndSwap(false, true) {
				return nil, errors.New("not yet")
			}
			return cm, nil
		}})
		m := newMirror()
		register(t, inf, m, "h", 0)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		if inf.HasSynced() {
			t.Fatal("synced on a first list the transform failed")
		}
		time.Sleep(time.Second) // fake time: the backoff
		synctest.Wait()
		if !inf.HasSynced() || inf.Reader().Len() != 2 {
			t.Fatalf("synced %v with %d cached a second after the dropped list; want the list made again", inf.HasSynced(), inf.Reader().Len())
		}
		srv.mu.Lock()
		lists := srv.lists
		srv.mu.Unlock()
		if lists != 2 {
			t.Errorf("%d lists, want 2: the dropped one and one more", lists)
		}
		m.waitForView(t, wait, srv.state)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Relists dropped one after another are each made again, the waits
// doubling: four failed lists, then a fifth syncs, 1+2+4+8 seconds later.
func TestInformer_relistsDroppedInARowAreEachMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a")
		var calls atomic.Int32
		inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{Transform: func(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			if calls.Add(1) <= 4 {
				return nil, errors.New("not yet")
			}
			return cm, nil
		}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		time.Sleep(14 * time.Second) // fake time: just short of the four waits
		synctest.Wait()
		if inf.HasSynced() {
			t.Fatal("synced before the fourth wait ended")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		srv.mu.Lock()
		lists := srv.lists
		srv.mu.Unlock()
		if !inf.HasSynced() || lists != 5 {
			t.Errorf("synced %v after %d lists; want synced by the fifth", inf.HasSynced(), lists)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
