package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/object"
)

// Provider engages and disengages a fleet's clusters until ctx ends:
// Secrets (kubeconfig Secrets, as Cluster API writes them), Directory
// (kubeconfig files), or one's own (kcp's workspaces, Gardener's shoots)
// calling Fleet.Engage, Update and Disengage.
type Provider interface {
	Run(ctx context.Context, f *Fleet) error
}

// Watched is a resource a provider lists and watches in the cluster it
// reads its clusters from (the management cluster), in Namespace ("" for
// every namespace); Group is "" for the core group.
type Watched struct {
	Group, Resource, Namespace string
}

// Watcher is a Provider that says what it lists and watches in the
// management cluster: manager.NewFleet grants it in the manifests' RBAC
// and checks it at start (Secrets is one).
type Watcher interface {
	Provider
	Watches() []Watched
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, f *Fleet) error

// Run calls p.
func (p ProviderFunc) Run(ctx context.Context, f *Fleet) error { return p(ctx, f) }

// PerCluster returns a reconciler of the fleet's keys made of one
// single-cluster reconciler per cluster: newRec makes a cluster's
// reconciler at the first key of that cluster, with that cluster's readers
// (Cache.Reader(c.Name()), not ok once the cluster left) and clients
// (c.Kube(), which fails on a bad kubeconfig; Client), and each key's
// ObjectName is reconciled by its cluster's. So a reconciler written for
// one cluster (a controller.Reconciler[object.ObjectName] holding its
// readers and clients) runs over every cluster of a fleet unchanged. An
// error of newRec fails that key's reconcile (retried with backoff) and
// newRec is called again at the cluster's next key. A cluster that leaves
// drops its reconciler; if it comes back it gets a new one. The reconciler
// returned must only be used by a Fleet (it finds the cluster of a key in
// its context).
func PerCluster(newRec func(c *Cluster) (controller.Reconciler[object.ObjectName], error)) controller.Reconciler[Key] {
	return &perCluster{newRec: newRec}
}

// perCluster is PerCluster's reconciler; its pointer keys its reconcilers
// in each Cluster (Cluster.recs), so they go with the cluster.
type perCluster struct {
	newRec func(c *Cluster) (controller.Reconciler[object.ObjectName], error)
}

// clusterRec is one cluster's reconciler, made once newRec succeeds.
type clusterRec struct {
	mu  sync.Mutex
	rec controller.Reconciler[object.ObjectName]
}

func (p *perCluster) Reconcile(ctx context.Context, k Key) (controller.Result, error) {
	c, ok := ClusterFrom(ctx)
	if !ok || c.name != k.Cluster {
		return controller.Result{}, errors.New("fleet: a PerCluster reconciler runs under a Fleet only (no cluster in its context)")
	}
	v, _ := c.recs.LoadOrStore(p, &clusterRec{})
	cr := v.(*clusterRec)
	cr.mu.Lock()
	if cr.rec == nil {
		rec, err := p.newRec(c)
		if err == nil && rec == nil {
			err = controller.ErrNilReconciler
		}
		if err != nil {
			cr.mu.Unlock()
			return controller.Result{}, fmt.Errorf("fleet: making the reconciler of cluster %s: %w", c.name, err)
		}
		cr.rec = rec
	}
	rec := cr.rec
	cr.mu.Unlock()
	return rec.Reconcile(ctx, k.ObjectName)
}

var (
	_ Provider = Secrets{}
	_ Provider = Directory{}
)
