package manager_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

const childrenPerOwner = 3

// replicaSetLike creates the children its owner lacks, counting them in the
// cache: the pattern that over-creates when the cache lags behind its writes.
type replicaSetLike struct {
	owners     store.Reader[*corev1.ConfigMap]
	children   store.Reader[*corev1.Secret]
	kube       kubernetes.Interface // writes go straight to the server
	reconciles atomic.Int64
}

func (r *replicaSetLike) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	r.reconciles.Add(1)
	owner, ok := r.owners.Get(name)
	if !ok {
		return controller.Result{}, nil
	}
	have := len(r.children.List(name.Namespace, labels.SelectorFromSet(labels.Set{"owner": name.Name})))
	for range childrenPerOwner - have {
		child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: name.Name + "-", Namespace: name.Namespace,
			Labels: map[string]string{"owner": name.Name}}}
		if err := apply.SetControllerReference(owner, child, scheme.Scheme); err != nil {
			return controller.Result{}, err
		}
		if _, err := r.kube.CoreV1().Secrets(name.Namespace).Create(ctx, child, metav1.CreateOptions{}); err != nil {
			return controller.Result{}, err
		}
	}
	return controller.Result{RequeueAfter: 10 * time.Millisecond}, nil // reconcile again and again: the hazard's trigger
}

// runReplicaSets runs the controller with the informers behind a proxy that
// stalls at random, until it has reconciled at least n times, and returns
// the number of children each owner ended up with on the server.
func runReplicaSets(t *testing.T, gate bool, n int64) map[string]int {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	kube := apiserver.Client(t, srv.Config())
	const owners = 10
	for i := range owners {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{"rs": "yes"}}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p, m := managerBehindProxy(t, srv)
	direct := rest.CopyConfig(srv.Config())
	direct.Wrap(m.Ledger().Transport) // writes go straight to the server, recorded for the key
	rec := &replicaSetLike{kube: apiserver.Client(t, direct)}
	ownerInf := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns, LabelSelector: "rs=yes"})
	childInf := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns, LabelSelector: "owner"})
	rec.owners, rec.children = ownerInf.Reader(), childInf.Reader()
	if _, err := manager.NewController(m, "rs", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}, ReadYourWrites: gate},
		manager.For(ownerInf), manager.Owns(childInf)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	stallAtRandom(t, p, "reconciles", func() int64 { return rec.reconciles.Load() }, n)
	eventually(t, 30*time.Second, "the cache to show every child", func() bool {
		list, err := kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "owner"})
		return err == nil && len(rec.children.List(ns, nil)) == len(list.Items)
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range list.Items {
		count[s.Labels["owner"]]++
	}
	waited, _ := metrics.Sum(m.Registry(), "ctrlkit_ledger_writes_waited_total", nil)
	holds, _ := metrics.Sum(m.Registry(), "ctrlkit_controller_gate_holds_total", nil)
	timeouts, _ := metrics.Sum(m.Registry(), "ctrlkit_ledger_timeouts_total", nil)
	t.Logf("gate %v: %d reconciles, children per owner %v; writes waited for %.0f, keys held %.0f, timeouts %.0f",
		gate, rec.reconciles.Load(), count, waited, holds, timeouts)
	return count
}

func TestReadYourWrites_withoutTheGateALaggingCacheMakesDuplicates(t *testing.T) {
	env.Get(t) // started before the leak check
	leakcheck.Check(t)
	// The hazard needs a reconcile to meet a lagging cache, which the random
	// stalls make likely, not certain: up to three rounds of 1,000.
	extra := 0
	for round := 0; round < 3 && extra == 0; round++ {
		for _, n := range runReplicaSets(t, false, 1000) {
			extra += n - childrenPerOwner
		}
	}
	if extra == 0 {
		t.Error("no duplicate children without the gate in 3 rounds: the test does not reproduce the hazard")
	}
}

func TestReadYourWrites_theGateMakesNoDuplicates(t *testing.T) {
	env.Get(t) // started before the leak check
	leakcheck.Check(t)
	count := runReplicaSets(t, true, 1000)
	if len(count) != 10 {
		t.Errorf("%d owners have children, want 10", len(count))
	}
	for owner, n := range count {
		if n != childrenPerOwner {
			t.Errorf("%s has %d children, want %d", owner, n, childrenPerOwner)
		}
	}
}

// counter adds one to its ConfigMap's data["n"] on every reconcile, reading
// the current value from the cache and writing with a merge patch (no
// resource-version precondition): a stale read loses an increment.
type counter struct {
	cms        store.Reader[*corev1.ConfigMap]
	kube       kubernetes.Interface
	writes     atomic.Int64
	reconciles atomic.Int64
}

func (r *counter) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	r.reconciles.Add(1)
	cm, ok := r.cms.Get(name)
	if !ok {
		return controller.Result{}, nil
	}
	n, _ := strconv.Atoi(cm.Data["n"])
	patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, n+1)
	if _, err := r.kube.CoreV1().ConfigMaps(name.Namespace).Patch(ctx, name.Name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		return controller.Result{}, err
	}
	r.writes.Add(1)
	return controller.Result{RequeueAfter: 10 * time.Millisecond}, nil
}

func TestReadYourWrites_theGateLosesNoUpdateReadBackFromTheCache(t *testing.T) {
	for _, gate := range []bool{false, true} {
		t.Run(fmt.Sprintf("gate %v", gate), func(t *testing.T) {
			srv := env.Get(t)
			ns := srv.Namespace(t)
			leakcheck.Check(t)
			kube := apiserver.Client(t, srv.Config())
			for i := range 5 {
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)}, Data: map[string]string{"n": "0"}},
					metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p, m := managerBehindProxy(t, srv)
			direct := rest.CopyConfig(srv.Config())
			direct.Wrap(m.Ledger().Transport)
			inf := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
			rec := &counter{cms: inf.Reader(), kube: apiserver.Client(t, direct)}
			if _, err := manager.NewController(m, "counter", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}, ReadYourWrites: gate},
				manager.For(inf)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			ran := make(chan error, 1)
			go func() { ran <- m.Run(ctx) }()
			stallAtRandom(t, p, "writes", func() int64 { return rec.writes.Load() }, 300)
			cancel()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
			list, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, cm := range list.Items {
				n, _ := strconv.Atoi(cm.Data["n"])
				total += n
			}
			lost := rec.writes.Load() - int64(total)
			t.Logf("gate %v: %d reconciles, %d increments written, %d on the server, %d lost", gate, rec.reconciles.Load(),
				rec.writes.Load(), total, lost)
			switch {
			case gate && lost != 0:
				t.Errorf("%d increments lost with the gate, want 0", lost)
			case !gate && lost == 0:
				t.Error("no increment lost without the gate: the test does not reproduce the hazard")
			}
		})
	}
}

// managerBehindProxy returns a manager whose informers list and watch
// through a fault proxy of their own, with controller gated when gate.
func managerBehindProxy(t *testing.T, srv *apiserver.Server) (*apiserver.Proxy, *manager.Manager) {
	t.Helper()
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Resume(); p.Close() })
	m, err := manager.New(p.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

// stallAtRandom lets the proxy's traffic flow and stall in turns (50-250ms,
// 50-350ms) until count reaches n, or fails t after 2 minutes.
func stallAtRandom(t *testing.T, p *apiserver.Proxy, what string, count func() int64, n int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for deadline := time.Now().Add(2 * time.Minute); count() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d %s in 2 minutes", count(), what)
		}
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond) // the watch flows (fault timing, not synchronisation)...
		p.Stall()
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond) // ...and stalls
		p.Resume()
	}
}
