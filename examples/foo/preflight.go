package foo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
)

// permission is one verb on one resource the controller needs.
type permission struct {
	verb, group, resource, subresource string
}

func (p permission) String() string {
	r := p.resource
	if p.subresource != "" {
		r += "/" + p.subresource
	}
	if p.group != "" {
		r += "." + p.group
	}
	return p.verb + " " + r
}

// needed mirrors config/rbac.yaml (cluster-wide part).
var needed = []permission{
	{verb: "list", group: v1alpha1.GroupName, resource: "foos"},
	{verb: "watch", group: v1alpha1.GroupName, resource: "foos"},
	{verb: "update", group: v1alpha1.GroupName, resource: "foos", subresource: "status"},
	{verb: "list", group: "apps", resource: "deployments"},
	{verb: "watch", group: "apps", resource: "deployments"},
	{verb: "create", group: "apps", resource: "deployments"},
	{verb: "update", group: "apps", resource: "deployments"},
	{verb: "create", resource: "events"},
}

// Preflight errors, for errors.Is.
var (
	ErrUnreachable  = errors.New("foo: cannot reach the API server")
	ErrCRDMissing   = errors.New("foo: the Foo CRD is not installed")
	ErrMissingRBAC  = errors.New("foo: missing RBAC permission")
	crdInstallHint  = "install it with: kubectl apply -f examples/foo/config/crd.yaml"
	rbacInstallHint = "grant it with examples/foo/config/rbac.yaml"
)

// Preflight checks, before any cache starts, what would otherwise surface as
// caches that never sync: that the API server answers, that it serves Foos,
// and that this identity may do everything the controller does in namespace
// ns ("" for all namespaces). Each failure names its cause.
func Preflight(ctx context.Context, kube kubernetes.Interface, host, ns string) error {
	_, err := kube.Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
	switch {
	case err != nil && (utilnet.IsConnectionRefused(err) || isNetwork(err)):
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, host, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w (%s is not served); %s", ErrCRDMissing, v1alpha1.Resource.GroupResource(), crdInstallHint)
	case err != nil && !apierrors.IsForbidden(err):
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, host, err)
	}
	var missing []string
	for _, p := range needed {
		ok, err := allowed(ctx, kube, ns, p)
		if err != nil {
			return fmt.Errorf("foo: checking permission to %s: %w", p, err)
		}
		if !ok {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		where := "in all namespaces"
		if ns != "" {
			where = "in namespace " + ns
		}
		return fmt.Errorf("%w %s: cannot %s; %s", ErrMissingRBAC, where, strings.Join(missing, ", cannot "), rbacInstallHint)
	}
	return nil
}

func allowed(ctx context.Context, kube kubernetes.Interface, ns string, p permission) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource,
		},
	}}
	got, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return got.Status.Allowed, nil
}

// isNetwork reports errors from below HTTP: DNS, TCP, TLS, timeouts.
func isNetwork(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	return utilnet.IsProbableEOF(err) || strings.Contains(err.Error(), "dial tcp") ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host")
}
