package apiserver

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The two halves of the 64-bit FNV-1a space of object UIDs.
const (
	lowerHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	upperHalf = "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')" // the end is exclusive: 2^64
)

// listShard lists ns's ConfigMaps with selector and returns their names and
// whether the server said it applied the selector.
func listShard(t *testing.T, cs *kubernetes.Clientset, ns, selector string) (map[string]bool, bool) {
	t.Helper()
	l, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{ShardSelector: selector})
	if err != nil {
		t.Fatalf("list with shard selector %q: %v", selector, err)
	}
	names := map[string]bool{}
	for _, cm := range l.Items {
		names[cm.Name] = true
	}
	return names, l.ShardInfo != nil
}

func TestServer_filtersListsByShardSelectorByDefault(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := clientset(t, srv.Config())
	createConfigMaps(t, cs, ns, "cm", 40)

	low, applied := listShard(t, cs, ns, lowerHalf)
	if !applied {
		t.Fatal("the list response has no metadata.shardInfo: the server did not apply the shard selector")
	}
	high, _ := listShard(t, cs, ns, upperHalf)
	if len(low) == 0 || len(high) == 0 || len(low)+len(high) != 40 {
		t.Fatalf("the halves hold %d and %d of 40 ConfigMaps, want a split of all 40", len(low), len(high))
	}
	for name := range low {
		if high[name] {
			t.Errorf("%s is in both halves", name)
		}
	}
}

func TestServer_withoutShardedListAndWatchIgnoresTheSelector(t *testing.T) {
	srv, err := Start(t.Context(), Options{DisableShardedListAndWatch: true, StartTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	cs := clientset(t, srv.Config())
	createConfigMaps(t, cs, "default", "cm", 10)
	got, applied := listShard(t, cs, "default", lowerHalf)
	if applied || len(got) != 10 {
		t.Errorf("with the feature off: %d of 10 listed, shardInfo set = %v; want all 10 and no shardInfo", len(got), applied)
	}
}
