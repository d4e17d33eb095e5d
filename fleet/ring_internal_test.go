package fleet

import (
	"fmt"
	"testing"

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
