package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
)

// Cluster names that differ in a character or two spread over the virtual
// shards (FNV-1a alone put all of these in one shard of 16).
func TestClusterHash_spreadsSimilarNames(t *testing.T) {
	const names, virtual = 64, 16
	counts := make([]int, virtual)
	for i := range names {
		counts[shard.VirtualOf(clusterHash(fmt.Sprintf("c%02d", i)), virtual)]++
	}
	for v, n := range counts {
		if n == 0 || n > 3*names/virtual {
			t.Errorf("virtual shard %d holds %d of %d similar names (all: %v), want each about %d", v, n, names, counts, names/virtual)
		}
	}
}

// A spread cluster's keys are placed by the whole key, so one cluster's
// objects fall in many shards; another cluster's keys all fall in its own.
func TestKeyHash_spreadsASpreadClustersObjects(t *testing.T) {
	const objects, virtual = 64, 16
	f := &Fleet{spread: map[string]bool{"big": true}}
	big, small := map[int]bool{}, map[int]bool{}
	for i := range objects {
		name := object.ObjectName{Namespace: "work", Name: fmt.Sprintf("obj-%02d", i)}
		big[shard.VirtualOf(f.keyHash(Key{Cluster: "big", ObjectName: name}), virtual)] = true
		small[shard.VirtualOf(f.keyHash(Key{Cluster: "small", ObjectName: name}), virtual)] = true
	}
	if len(big) < virtual/2 || len(small) != 1 {
		t.Errorf("%d objects of a spread cluster fall in %d of %d shards (want most), of another cluster in %d (want 1)",
			objects, len(big), virtual, len(small))
	}
	for _, k := range []Key{{Cluster: "big", ObjectName: object.ObjectName{Namespace: "work", Name: "a"}},
		{Cluster: "big", ObjectName: object.ObjectName{Name: "node-1"}}} {
		if got, want := f.keyHash(k), shard.SpreadHash(k.String()); got != want {
			t.Errorf("keyHash(%s) = %x, SpreadHash of the key = %x", k, got, want)
		}
	}
	k := Key{Cluster: "big", ObjectName: object.ObjectName{Namespace: "work", Name: "a"}}
	if n := testing.AllocsPerRun(100, func() { f.keyHash(k) }); n != 0 {
		t.Errorf("keyHash of a spread cluster's key allocates %v times, want 0 (it runs on every event)", n)
	}
	if _, err := New(controller.ReconcileFunc[Key](func(context.Context, Key) (controller.Result, error) { return controller.Result{}, nil }),
		Options{Spread: []string{"big"}}); err == nil || !strings.Contains(err.Error(), "Spread needs Options.Ring") {
		t.Errorf("New with Spread and no Ring: %v, want an error saying Spread needs Ring", err)
	}
}

// A spread cluster's share: an object by its own key, an owned object by
// its controller owner's of the For kind (none of that kind: not cached).
func TestSpreadShard_containsByKeyAndByControllerOwner(t *testing.T) {
	f := &Fleet{spread: map[string]bool{"big": true}}
	in := Key{Cluster: "big", ObjectName: object.ObjectName{Namespace: "work", Name: "in"}}
	h := f.keyHash(in)
	sel := &shard.Selector{Key: shard.Namespace, Ranges: []shard.Range{{Start: h, End: h + 1}}} // just in's hash
	app := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	owned := func(kind, apiVersion, owner string, controller bool) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "child",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner, Controller: &controller}}}}
	}
	for _, c := range []struct {
		name  string
		owner schema.GroupKind
		obj   *corev1.ConfigMap
		want  bool
	}{
		{"a primary whose key is in", schema.GroupKind{}, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "in"}}, true},
		{"a primary whose key is out", schema.GroupKind{}, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "out"}}, false},
		{"owned, its controller's key in", app, owned("Deployment", "apps/v1", "in", true), true},
		{"owned, its controller's key out", app, owned("Deployment", "apps/v1", "out", true), false},
		{"owned by an owner that is not its controller", app, owned("Deployment", "apps/v1", "in", false), false},
		{"owned by another kind", app, owned("StatefulSet", "apps/v1", "in", true), false},
	} {
		s := spreadShard{f: f, sel: sel, cluster: "big", owner: c.owner}
		if got := s.Contains(c.obj); got != c.want {
			t.Errorf("%s: Contains = %v, want %v", c.name, got, c.want)
		}
		if s.ServerSelector() != "" {
			t.Errorf("a spread cluster's shard sent to the server: %q", s.ServerSelector())
		}
	}
}

// A spread cluster's relist is waited for; one of an informer that stopped
// (its cluster left) is no error, nor one of a cluster that reports an
// error (it lists when it answers); another failure is.
func TestAwaitRelist_toleratesAStoppedInformerAndAClusterThatIsDown(t *testing.T) {
	var down error
	m := &member{name: "big", runs: []*sourceRun{{lastErr: func() error { return down }}}}
	m.cluster = &Cluster{member: m}
	f := &Fleet{}
	ended := func(err error) <-chan error {
		c := make(chan error, 1)
		c <- err
		return c
	}
	if err := f.awaitRelist(t.Context(), m, ended(nil)); err != nil {
		t.Errorf("a relist that ended: %v", err)
	}
	if err := f.awaitRelist(t.Context(), m, ended(fmt.Errorf("informer big: relist: %w", informer.ErrStopped))); err != nil {
		t.Errorf("a relist of a stopped informer: %v, want no error", err)
	}
	if err := f.awaitRelist(t.Context(), m, ended(errors.New("boom"))); err == nil || !strings.Contains(err.Error(), "cluster big: boom") {
		t.Errorf("a relist that failed: %v, want the error naming the cluster", err)
	}
	down = errors.New("connection refused")
	if err := f.awaitRelist(t.Context(), m, make(chan error)); err != nil {
		t.Errorf("a relist of a cluster that is down: %v, want no error (and no wait)", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	down = nil
	if err := f.awaitRelist(ctx, m, make(chan error)); !errors.Is(err, context.Canceled) {
		t.Errorf("a relist when the context ended: %v, want context.Canceled", err)
	}
}

// The fleet's DrainTimeout is its sharder's (how long a replica giving up
// clusters waits for their reconciles before cancelling them), and unset
// it leaves the sharder's default.
func TestSharderOptions_carryTheFleetsDrainTimeout(t *testing.T) {
	for _, d := range []time.Duration{5 * time.Second, 0} {
		f := &Fleet{opts: Options{Ring: shard.Ring{Name: "clusters"}, DrainTimeout: d}}
		if got := f.sharderOptions(nil); got.DrainTimeout != d || got.Name != "clusters" || got.Key != shard.Namespace {
			t.Errorf("DrainTimeout %v: the sharder's options carry DrainTimeout %v, ring %q, key %q", d, got.DrainTimeout, got.Name, got.Key)
		}
	}
}
