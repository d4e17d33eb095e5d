package manager

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/client"
)

// Client returns the manager's client of T, for writes (and reads that
// must not come from a cache): every caller asking for the same T gets the
// same client. It shares the manager's HTTP connections, RESTMapper and
// scheme, and its read-your-writes ledger: a write made with a reconcile's
// context is waited for like one made through Kube().
//
// T must be registered in the manager's scheme (Options.AddToScheme); if
// it is not, Run fails at start saying so, as does every call of the
// client, so this call needs no error check. The resource is looked up on
// the server at the client's first call, not here.
func Client[T Object](m *Manager) *client.Client[T] {
	t := reflect.TypeFor[T]()
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[t]; ok {
		return c.(*client.Client[T])
	}
	c := client.New[T](m.discovery, m.scheme)
	if _, err := c.GroupVersionKind(); err != nil {
		m.errs = append(m.errs, err)
	}
	if m.clients == nil {
		m.clients = map[reflect.Type]any{}
	}
	m.clients[t] = c
	return c
}

// Finalizer returns the finalizer called name (domain-qualified, e.g.
// "example.com/cleanup") on objects of type T, written through Client[T],
// whose cleanup runs when an object is being deleted; see apply.Finalizer.
// A name the API server would refuse makes Run fail at start saying so
// (Finalize then returns that error too), so this call needs no error check.
// The finalizer patches T's objects: the start's permission check and
// Manifests' role count patch on T's resource, where the manager's
// informers of T watch (everywhere when none does).
func Finalizer[T Object](m *Manager, name string, cleanup func(ctx context.Context, obj T) error) *apply.Finalizer[T] {
	c := Client[T](m)
	f, err := apply.NewFinalizer(name, c, cleanup)
	gvk, kindErr := c.GroupVersionKind()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs = append(m.errs, fmt.Errorf("manager: %w", err))
	}
	if kindErr == nil && !slices.Contains(m.finalized, gvk) {
		m.finalized = append(m.finalized, gvk)
	}
	return f
}

// finalizerPermissions are the patches the Finalizers need (see Finalizer),
// the resources named by p. Called with m.mu held.
func (m *Manager) finalizerPermissions(p plurals) []Permission {
	var out []Permission
	for _, gvk := range m.finalized {
		gvr := p.resource(gvk)
		var namespaces []string
		for _, e := range m.informers {
			if e.gvk == gvk && !slices.Contains(namespaces, e.scope.Namespace) {
				namespaces = append(namespaces, e.scope.Namespace)
			}
		}
		if len(namespaces) == 0 || slices.Contains(namespaces, "") {
			namespaces = []string{""}
		}
		for _, ns := range namespaces {
			out = append(out, Permission{Verb: "patch", Group: gvr.Group, Resource: gvr.Resource, Namespace: ns})
		}
	}
	return out
}
