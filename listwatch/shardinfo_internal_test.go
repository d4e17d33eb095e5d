package listwatch

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A list answer's metadata as a server (an aggregated one, say) may send
// it: missing, null, or not an object is no shardInfo, never a panic.
func TestShardInfoOf_readsAnyUnstructuredListMetadataWithoutPanicking(t *testing.T) {
	for _, tc := range []struct {
		name string
		list map[string]any
		want bool
	}{
		{"no metadata", map[string]any{}, false},
		{"null metadata", map[string]any{"metadata": nil}, false},
		{"metadata a string", map[string]any{"metadata": "x"}, false},
		{"metadata a list", map[string]any{"metadata": []any{1}}, false},
		{"metadata without shardInfo", map[string]any{"metadata": map[string]any{"resourceVersion": "5"}}, false},
		{"metadata with shardInfo", map[string]any{"metadata": map[string]any{"shardInfo": map[string]any{}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shardInfoOf(&unstructured.UnstructuredList{Object: tc.list}); (got != nil) != tc.want {
				t.Errorf("shardInfoOf(%v) = %v, want shardInfo: %v", tc.list, got, tc.want)
			}
		})
	}
}
