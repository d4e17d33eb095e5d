package fleet

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

// Cluster is one engaged cluster as its reconciles see it: its name, and
// clients that share the fleet's connections to it. A reconcile gets the
// cluster of its key with ClusterFrom(ctx) (or Fleet.Cluster); a Cluster
// stays usable after it is disengaged, but its informers are stopped.
type Cluster struct {
	member *member
	name   string
	cfg    atomic.Pointer[rest.Config] // the latest (see Fleet.Update)
	hc     *http.Client
	disc   listwatch.Discovery
	scheme *runtime.Scheme

	kubeOnce sync.Once
	kube     kubernetes.Interface
	kubeErr  error
	clients  sync.Map // reflect.Type of T → *client.Client[T]
	recs     sync.Map // *perCluster → *clusterRec: PerCluster's reconcilers of this cluster
}

// Name returns the cluster's name in the fleet (Key.Cluster).
func (c *Cluster) Name() string { return c.name }

// Config returns a copy of the cluster's configuration: the one it was
// engaged with or, after Fleet.Update, the latest (with the fleet's
// default of no client-side rate limit applied).
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.cfg.Load()) }

// HTTPClient returns the HTTP client of the fleet's connections to the
// cluster.
func (c *Cluster) HTTPClient() *http.Client { return c.hc }

// Kube returns a clientset of the cluster, sharing the fleet's connections
// (made at the first call, so an engaged cluster costs none until used).
func (c *Cluster) Kube() (kubernetes.Interface, error) {
	c.kubeOnce.Do(func() { c.kube, c.kubeErr = kubernetes.NewForConfigAndClient(c.cfg.Load(), c.hc) })
	return c.kube, c.kubeErr
}

// Client returns the typed client of T in cluster c (see package client),
// sharing the fleet's connections and discovery of c; one per type and
// cluster, made at the first call. T must be in the fleet's scheme.
func Client[T client.Object](c *Cluster) *client.Client[T] {
	t := reflect.TypeFor[T]()
	if v, ok := c.clients.Load(t); ok {
		return v.(*client.Client[T])
	}
	v, _ := c.clients.LoadOrStore(t, client.New[T](c.disc, c.scheme))
	return v.(*client.Client[T])
}

type clusterKey struct{}

// ClusterFrom returns the cluster of the key being reconciled, from the
// context the fleet hands its reconciler.
func ClusterFrom(ctx context.Context) (*Cluster, bool) {
	c, ok := ctx.Value(clusterKey{}).(*Cluster)
	return c, ok
}

// Cluster returns the engaged cluster called name.
func (f *Fleet) Cluster(name string) (*Cluster, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.clusters[name]
	if m == nil {
		return nil, false
	}
	return m.cluster, true
}
