package fleet

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A source's informers are named by its kind while it is the only source
// of that kind, else by its role and scope too, so that a For and an Owns
// of one kind tell apart in logs, metrics and the debug page.
func TestSourceName_namesTheRoleAndScopeOfASecondSourceOfAKind(t *testing.T) {
	cm := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secret := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	var sources []source
	for _, tc := range []struct {
		gvk   schema.GroupVersionKind
		role  int
		scope Scope
		want  string
	}{
		{cm, sourceFor, Scope{LabelSelector: "replicate=true"}, "ConfigMap"},
		{secret, sourceOwns, Scope{}, "Secret"},
		{cm, sourceOwns, Scope{LabelSelector: "replica=true"}, "ConfigMap (Owns, labels replica=true)"},
		{cm, sourceMapped, Scope{Namespace: "web", FieldSelector: "metadata.name=a"}, "ConfigMap (Watches, in web, fields metadata.name=a)"},
		{cm, sourceOwns, Scope{LabelSelector: "replica=true"}, "ConfigMap (Owns, labels replica=true) 2"},
		{secret, sourceMapped, Scope{}, "Secret (Watches)"},
	} {
		got := sourceName(sources, tc.gvk, tc.role, tc.scope)
		if got != tc.want {
			t.Errorf("source %d: named %q, want %q", len(sources)+1, got, tc.want)
		}
		sources = append(sources, source{gvk: tc.gvk, name: got, role: tc.role})
	}
}
