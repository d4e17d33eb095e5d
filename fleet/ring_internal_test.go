package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctrlkit/ctrlkit/controller"
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
	if _, err := New(controller.ReconcileFunc[Key](func(context.Context, Key) (controller.Result, error) { return controller.Result{}, nil }),
		Options{Spread: []string{"big"}}); err == nil || !strings.Contains(err.Error(), "Spread needs Options.Ring") {
		t.Errorf("New with Spread and no Ring: %v, want an error saying Spread needs Ring", err)
	}
}
