package manager_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ctrlkit/ctrlkit/manager"
)

// role is what controller-gen writes from +kubebuilder:rbac markers, with a
// hand-written leader-election Role and a binding after it.
const role = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: foo-controller
rules:
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [create, get, list, update, watch]
- apiGroups: [samplecontroller.ctrlkit.dev]
  resources: [foos/status]
  verbs: [update]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [settings]
  verbs: [get]
- nonResourceURLs: [/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leader-election, namespace: foo-system}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leader-election, namespace: foo-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leader-election}
`

func TestPermissionsFromRBAC_expandsRulesIntoTheWritesToCheck(t *testing.T) {
	got, err := manager.PermissionsFromRBAC([]byte(role), "web")
	if err != nil {
		t.Fatal(err)
	}
	want := []manager.Permission{
		{Verb: "create", Resource: "events", Namespace: "web"},
		{Verb: "patch", Resource: "events", Namespace: "web"},
		{Verb: "create", Group: "apps", Resource: "deployments", Namespace: "web"},
		{Verb: "get", Group: "apps", Resource: "deployments", Namespace: "web"},
		{Verb: "update", Group: "apps", Resource: "deployments", Namespace: "web"},
		{Verb: "update", Group: "samplecontroller.ctrlkit.dev", Resource: "foos", Subresource: "status", Namespace: "web"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "foo-system"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "foo-system"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "foo-system"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("permissions:\n got %v\nwant %v", got, want)
	}
}

func TestPermissionsFromRBAC_aClusterRoleIsCheckedInEveryNamespaceForAnEmptyNamespace(t *testing.T) {
	got, err := manager.PermissionsFromRBAC([]byte(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": {"name": "x"}, "rules": [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]}`), "")
	want := []manager.Permission{{Verb: "patch", Group: "apps", Resource: "deployments", Subresource: "scale"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("PermissionsFromRBAC(JSON) = %v, %v; want %v", got, err, want)
	}
}

func TestPermissionsFromRBAC_badInputIsAClearError(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"malformed YAML in the second document", role[:strings.Index(role, "kind: Role\n")] + "rules: [unclosed\n",
			"RBAC manifest, document 2"},
		{"no role at all", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n", "no Role or ClusterRole"},
		{"nothing", "", "no Role or ClusterRole"},
		{"an older RBAC API", "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: ClusterRole\nmetadata: {name: old}\n",
			`document 1: ClusterRole "old" has apiVersion "rbac.authorization.k8s.io/v1beta1", want rbac.authorization.k8s.io/v1`},
		{"rules that are not a list", "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\nrules: {verbs: get}\n",
			"document 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := manager.PermissionsFromRBAC([]byte(tc.yaml), "web")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PermissionsFromRBAC = %v, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
}
