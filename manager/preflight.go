package manager

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Permission is one API verb on one resource, as RBAC grants it.
type Permission struct {
	Verb        string // get, list, watch, create, update, patch, delete
	Group       string // "" for the core group, "apps", ...
	Resource    string // the plural resource: "deployments"
	Subresource string // "status", "scale", or ""
	Namespace   string // "" for every namespace (or cluster-scoped)
}

// String reads like RBAC: "create deployments.apps in namespace web".
func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	if p.Group != "" {
		r += "." + p.Group
	}
	where := "in every namespace"
	if p.Namespace != "" {
		where = "in namespace " + p.Namespace
	}
	return p.Verb + " " + r + " " + where
}

// MissingPermissions asks the API server, with one SelfSubjectAccessReview
// per distinct permission (at most 8 in flight at once), which of perms the
// credentials of kube lack, in perms' order. It fails only when a review
// cannot be made; it then returns the missing permissions the reviews made
// found.
func MissingPermissions(ctx context.Context, kube kubernetes.Interface, perms []Permission) ([]Permission, error) {
	const ( // a verdict; 0: no answer
		allowed = iota + 1
		denied
	)
	distinct := slices.Clone(perms)
	slices.SortFunc(distinct, comparePermissions)
	distinct = slices.Compact(distinct)
	verdict := make([]int, len(distinct))
	var g errgroup.Group
	g.SetLimit(8)
	for i, p := range distinct {
		g.Go(func() error {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: p.Namespace, Verb: p.Verb,
					Group: p.Group, Resource: p.Resource, Subresource: p.Subresource},
			}}
			got, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("checking permission to %s: %w", p, err)
			}
			verdict[i] = allowed
			if !got.Status.Allowed {
				verdict[i] = denied
			}
			return nil
		})
	}
	err := g.Wait()
	var missing []Permission
	for _, p := range perms {
		i, _ := slices.BinarySearchFunc(distinct, p, comparePermissions)
		if verdict[i] == denied && !slices.Contains(missing, p) {
			missing = append(missing, p)
		}
	}
	return missing, err
}

// comparePermissions orders permissions field by field.
func comparePermissions(a, b Permission) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource),
		cmp.Compare(a.Subresource, b.Subresource), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Verb, b.Verb))
}

// preflight runs at start, before the caches: the API server must answer
// and leader election must be able to work (else Run fails), and with
// RequireServedKinds every informer's kind must be served.
func (m *Manager) preflight(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.StartTimeout)
	defer cancel()
	if _, err := m.kube.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx); err != nil {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, m.cfg.Host, shorten(err))
	}
	if err := m.checkLease(ctx); err != nil {
		return err
	}
	if !m.opts.RequireServedKinds {
		return nil
	}
	m.mu.Lock()
	infs := slices.Clone(m.informers)
	m.mu.Unlock()
	for _, e := range infs {
		if _, err := e.lw.Mapping(); err != nil {
			return fmt.Errorf("%w: informer %s: %v", ErrKindNotServed, e.name, err)
		}
	}
	return nil
}

// checkPermissions runs beside the caches as they start (nothing waits for
// it): kinds the server does not serve and permissions the controllers lack
// are logged at WARN, one line each, since they can be fixed while the
// manager runs (/readyz names them until then). It always returns nil.
func (m *Manager) checkPermissions(running context.Context) error {
	ctx, cancel := context.WithTimeout(running, m.opts.StartTimeout)
	defer cancel()
	plurals := m.plurals()
	perms := append([]Permission(nil), m.opts.Permissions...)
	m.mu.Lock()
	infs := append([]informerEntry(nil), m.informers...)
	perms = append(perms, m.finalizerPermissions(plurals)...)
	perms = append(perms, m.providerPermissions...)
	sets := slices.Collect(maps.Values(m.sets))
	m.mu.Unlock()
	for _, set := range sets { // the namespaces a set holds now (its lock after m's, not under it)
		gvr := plurals.resource(set.kind())
		for _, ns := range set.namespaces() {
			for _, verb := range []string{"list", "watch"} {
				perms = append(perms, Permission{Verb: verb, Group: gvr.Group, Resource: gvr.Resource, Namespace: ns})
			}
		}
	}
	for _, e := range infs {
		mp, err := e.lw.Mapping()
		if err != nil {
			m.opts.Logger.Warn("manager: preflight: an informer cannot start yet", "informer", e.name, "err", err)
			continue
		}
		for _, verb := range []string{"list", "watch"} {
			perms = append(perms, Permission{Verb: verb, Group: mp.Resource.Group, Resource: mp.Resource.Resource,
				Namespace: e.scope.Namespace})
		}
	}
	missing, err := MissingPermissions(ctx, m.kube, perms)
	if err != nil && running.Err() == nil { // not when the manager is stopping; a StartTimeout that ran out is said
		m.opts.Logger.Warn("manager: preflight: cannot check permissions", "err", shorten(err))
	}
	for _, p := range missing {
		m.opts.Logger.Warn("manager: preflight: missing RBAC permission; grant it with a Role or ClusterRole",
			"permission", p.String())
	}
	return nil
}

// shorten drops the request URL from client errors: "Get \"https://...\": dial
// tcp ...: connection refused" becomes "dial tcp ...: connection refused".
func shorten(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "\": "); i >= 0 && strings.HasPrefix(msg, "Get \"") {
		return msg[i+3:]
	}
	return msg
}

// checkLease fails when leader election cannot work: the Lease's namespace
// does not exist, or the credentials may not get, create or update Leases
// there. Without this, client-go's elector retries forever and the
// controllers never start.
func (m *Manager) checkLease(ctx context.Context) error {
	if m.elector == nil {
		return nil
	}
	le := m.opts.LeaderElection
	_, err := m.kube.CoreV1().Namespaces().Get(ctx, le.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: the namespace %q of Lease %s does not exist", ErrLeaseUnusable, le.Namespace, le.Name)
	}
	var perms []Permission
	for _, verb := range []string{"get", "create", "update"} {
		perms = append(perms, Permission{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: le.Namespace})
	}
	missing, err := MissingPermissions(ctx, m.kube, perms)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLeaseUnusable, err)
	}
	if len(missing) > 0 {
		var s []string
		for _, p := range missing {
			s = append(s, p.String())
		}
		return fmt.Errorf("%w: Lease %s needs RBAC permission to %s", ErrLeaseUnusable, le.Name, strings.Join(s, ", to "))
	}
	return nil
}
