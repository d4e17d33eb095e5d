package manager

import (
	"context"
	"fmt"
	"reflect"

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
func Finalizer[T Object](m *Manager, name string, cleanup func(ctx context.Context, obj T) error) *apply.Finalizer[T] {
	f, err := apply.NewFinalizer(name, Client[T](m), cleanup)
	if err != nil {
		m.mu.Lock()
		m.errs = append(m.errs, fmt.Errorf("manager: %w", err))
		m.mu.Unlock()
	}
	return f
}
