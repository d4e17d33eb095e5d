package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// careless writes a label into the cached ConfigMap "bad" it reads: the
// bug the mutation detector exists for.
type careless struct {
	cms  store.Reader[*corev1.ConfigMap]
	done atomic.Bool
}

func (r *careless) Reconcile(_ context.Context, name object.ObjectName) (controller.Result, error) {
	if cm, ok := r.cms.Get(name); ok && name.Name == "bad" && !r.done.Load() {
		cm.Labels["touched"] = "yes" // no DeepCopy
		r.done.Store(true)
	}
	return controller.Result{}, nil
}

// careful annotates every ConfigMap but "bad" through the API, on a
// DeepCopy, with read-your-writes: the right way, which must never be
// reported. (It leaves "bad" alone: reading it while careless writes into it
// would be a data race, which -race reports on its own.)
type careful struct {
	cms     store.Reader[*corev1.ConfigMap]
	kube    kubernetes.Interface
	written atomic.Int64
}

func (r *careful) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	cm, ok := r.cms.Get(name)
	if !ok || name.Name == "bad" || cm.Annotations["seen"] == "yes" {
		return controller.Result{}, nil
	}
	cm = cm.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations["seen"] = "yes"
	if _, err := r.kube.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return controller.Result{}, err
	}
	r.written.Add(1)
	return controller.Result{}, nil
}

// A reconcile that writes into a cached object fails the test, naming the
// object and the field; a controller that copies before writing, with
// read-your-writes, on the same informer, is never reported.
func TestManager_aReconcileWritingIntoTheCacheIsReportedWithTheObjectAndTheField(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	var mu sync.Mutex
	var reported []error
	opts := quiet(t)
	opts.Informers.OnMutation = func(err error) { // default: panic; here the test fails below instead
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	bad := &careless{cms: cms.Reader()}
	good := &careful{cms: cms.Reader(), kube: m.Kube()}
	if _, err := manager.NewController(m, "careless", bad, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.NewController(m, "careful", good, manager.ControllerOptions{ReadYourWrites: true}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	kube := apiserver.Client(t, srv.Config())
	const n = 20
	for i := range n {
		name := fmt.Sprintf("cm-%d", i)
		if i == 0 {
			name = "bad"
		}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	eventually(t, 30*time.Second, "every other ConfigMap annotated and the careless reconcile run", func() bool {
		return good.written.Load() >= n-1 && bad.done.Load()
	})
	cancel() // the controllers stop, then the informers: the last check sees every write
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 {
		t.Fatalf("reported %d mutations, want the careless one alone: %v", len(reported), reported)
	}
	var me *informer.MutationError
	if !errors.As(reported[0], &me) || me.Name != (object.ObjectName{Namespace: ns, Name: "bad"}) {
		t.Fatalf("reported %v, want a *MutationError about %s/bad", reported[0], ns)
	}
	msg := reported[0].Error()
	for _, want := range []string{ns + "/bad", `.metadata.labels["touched"]: (absent) -> "yes"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
