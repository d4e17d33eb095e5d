package informer_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

func TestInformer_statsShowTheCacheTheReflectorAndEachHandlersBacklog(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a", "b", "c")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{Name: "cms"})
	if st := inf.Stats(); st.Synced || st.Objects != 0 || len(st.Handlers) != 0 {
		t.Fatalf("stats before Run = %+v", st)
	}
	slow, fast := newMirror(), newMirror()
	release := make(chan struct{})
	slow.block = release
	register(t, inf, slow, "slow", 0)
	register(t, inf, fast, "fast", 0)
	run(t, inf)
	fast.waitForView(t, wait, srv.state)
	srv.create("d", map[string]string{"k": "v"})
	fast.waitForView(t, wait, srv.state)

	st := inf.Stats()
	if st.Name != "cms" || !st.Synced || st.Objects != 4 || st.ResourceVersion != "4" || st.ApproxBytes <= 0 {
		t.Errorf("stats = %+v, want 4 objects at RV 4 with a size", st)
	}
	if r := st.Reflector; r.Mode != reflector.ModePaginated || r.Syncs != 1 || r.ResourceVersion != "4" {
		t.Errorf("reflector stats = %+v", r)
	}
	if len(st.Handlers) != 2 || st.Handlers[0].Name != "fast" || st.Handlers[1].Name != "slow" {
		t.Fatalf("handlers = %+v, want fast and slow, by name", st.Handlers)
	}
	if h := st.Handlers[0]; !h.Synced || h.PendingKeys != 0 {
		t.Errorf("the fast handler: %+v, want synced with nothing pending", h)
	}
	// The slow handler blocks in its first initial add: the two other
	// initial adds and the created object wait.
	waitFor(t, wait, "the slow handler's 3 pending keys", func() bool { return inf.Stats().Handlers[1].PendingKeys == 3 })
	if h := inf.Stats().Handlers[1]; h.Synced || h.OldestPending <= 0 {
		t.Errorf("the slow handler: %+v, want not synced, with an oldest pending age", h)
	}
	if rv, ok := inf.CachedVersion(object.ObjectName{Namespace: "ns", Name: "d"}); !ok || rv != "4" {
		t.Errorf("CachedVersion(ns/d) = %q, %v", rv, ok)
	}
	if _, ok := inf.CachedVersion(object.ObjectName{Namespace: "ns", Name: "nobody"}); ok {
		t.Error("CachedVersion of a missing key reports it cached")
	}
	close(release)
	slow.waitForView(t, wait, srv.state)
}
