package manager

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// PermissionsFromRBAC turns the rules of the Roles and ClusterRoles in
// roleYAML (one or more YAML or JSON documents, e.g. the role.yaml that
// controller-gen writes from +kubebuilder:rbac markers) into the
// Permissions for Options.Permissions, so the RBAC a controller needs is
// written once, as markers, and the start-up check reads the same list the
// cluster is given.
//
// Each rule gives one Permission per API group × resource × verb; a
// resource "foos/status" is the status subresource of foos. A ClusterRole's
// permissions are asked in namespace ("" for every namespace), a Role's in
// its own namespace (or namespace if it names none). Left out: the verbs
// list and watch, which the manager checks itself for every informer's
// scope (the role may grant them more widely than the informers need);
// rules with resourceNames, which a check for every name would deny; and
// nonResourceURLs. Documents of other kinds (ServiceAccounts, bindings) are
// skipped. Duplicates are dropped; the order is the rules' order.
//
// It fails, naming the document, on YAML that cannot be decoded, on a Role
// or ClusterRole of another API version than rbac.authorization.k8s.io/v1,
// and when roleYAML holds no Role or ClusterRole at all.
func PermissionsFromRBAC(roleYAML []byte, namespace string) ([]Permission, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(roleYAML), 4096)
	var perms []Permission
	roles := 0
	for doc := 1; ; doc++ {
		var r rbacDocument
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("RBAC manifest, document %d: %w", doc, err)
		}
		if r.Kind != "Role" && r.Kind != "ClusterRole" {
			continue
		}
		if r.APIVersion != rbacv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("RBAC manifest, document %d: %s %q has apiVersion %q, want %s",
				doc, r.Kind, r.Name, r.APIVersion, rbacv1.SchemeGroupVersion)
		}
		roles++
		ns := namespace
		if r.Kind == "Role" && r.Namespace != "" {
			ns = r.Namespace
		}
		for _, rule := range r.Rules {
			for _, p := range ruleToPermissions(rule, ns) {
				if !slices.Contains(perms, p) {
					perms = append(perms, p)
				}
			}
		}
	}
	if roles == 0 {
		return nil, errors.New("RBAC manifest: no Role or ClusterRole in it")
	}
	return perms, nil
}

// rbacDocument is the part of a Role or ClusterRole that
// PermissionsFromRBAC reads.
type rbacDocument struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Rules             []rbacv1.PolicyRule `json:"rules"`
}

// ruleToPermissions expands one rule (see PermissionsFromRBAC for what it
// leaves out).
func ruleToPermissions(rule rbacv1.PolicyRule, ns string) []Permission {
	if len(rule.ResourceNames) > 0 {
		return nil
	}
	var perms []Permission
	for _, g := range rule.APIGroups {
		for _, res := range rule.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, v := range rule.Verbs {
				if v == "list" || v == "watch" {
					continue
				}
				perms = append(perms, Permission{Verb: v, Group: g, Resource: resource, Subresource: sub, Namespace: ns})
			}
		}
	}
	return perms
}
