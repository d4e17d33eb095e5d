package foo_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/manager"
)

func TestPermissions_areTheWritesOfTheGeneratedRoleAndItGrantsThem(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	perms, err := foo.Permissions(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []manager.Permission{
		{Verb: "update", Group: "samplecontroller.ctrlkit.dev", Resource: "foos", Subresource: "status", Namespace: ns},
		{Verb: "create", Group: "apps", Resource: "deployments", Namespace: ns},
		{Verb: "update", Group: "apps", Resource: "deployments", Namespace: ns},
		{Verb: "create", Resource: "events", Namespace: ns},
	} {
		if !slices.Contains(perms, p) {
			t.Errorf("Permissions(%q) = %v, missing %s", ns, perms, p)
		}
	}

	// Grant the generated ClusterRole to a user and ask the server as that user.
	admin := apiserver.Client(t, srv.Config())
	role := &rbacv1.ClusterRole{}
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(config.Role), 4096).Decode(role); err != nil {
		t.Fatal(err)
	}
	role.Name = ns + "-foo-controller" // the server is shared: a name of this test's own
	if _, err := admin.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := ns + "-controller"
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "foo-controller", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for who, wantMissing := range map[string]int{user: 0, ns + "-nobody": len(perms)} {
		cfg := rest.CopyConfig(srv.Config())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: who}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// RBAC's authorizer reads bindings from its own cache: wait for it.
		eventually(t, 10*time.Second, fmt.Sprintf("%s to miss %d permissions", who, wantMissing), func() bool {
			missing, err := manager.MissingPermissions(t.Context(), kube, perms)
			return err == nil && len(missing) == wantMissing
		})
	}
}
