package informer_test

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Informers that keep their caches across restarts: each informer of the
// factory writes a snapshot in Dir when it stops, and the next run starts
// from it. The first run starts cold (there is no snapshot yet). (client-go's
// in-memory fake, used here, keeps no history to resume from; against a real
// API server, see the manager's CacheDir.)
func ExampleSnapshotOptions() {
	dir, err := os.MkdirTemp("", "informer-snapshot")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", ResourceVersion: "7"}})
	f := informer.NewFactory(informer.FactoryOptions{
		Snapshots: informer.SnapshotOptions{Dir: dir,
			Cluster: func(context.Context) (string, error) { return "uid-of-kube-system", nil }},
		Reflector: reflector.Options{DisableWatchList: true},
	})
	scope := informer.Scope{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default"}
	inf, err := informer.For(f, scope, func() reflector.ListerWatcher[*corev1.ConfigMap] {
		cms := cs.CoreV1().ConfigMaps("default")
		return listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.TODO())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	if err := f.WaitForCacheSync(ctx); err != nil {
		fmt.Println(err)
	}
	for _, st := range f.Statuses() {
		fmt.Println(st.Name, "started", st.Start)
	}
	cancel()
	<-done
	st := inf.SnapshotStats()
	fmt.Println("snapshots written:", st.Writes, "objects:", st.LastObjects)
	// Output:
	// configmaps/v1 in namespace default started cold: no snapshot yet
	// snapshots written: 1 objects: 1
}
