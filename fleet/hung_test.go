package fleet_test

import (
	"context"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// A cluster whose API server stops answering (its process stopped, as a
// partition that drops packets looks to a client) holds up no other
// cluster with the fleet's defaults: the other cluster's new object is
// reconciled at once while the stopped one's reconciles hang in their
// requests (a fleet's workers default to 4, a cluster's keys in flight to
// 3 of them); the probe reports the stopped cluster unreachable within two
// intervals, the other well; Disengage returns at once and cancels the
// stopped cluster's reconciles in flight; Run returns promptly.
func TestFleet_aClusterWhoseServerStopsAnsweringHoldsUpNoOther(t *testing.T) {
	const ns = "fleet"
	leakcheck.Check(t)
	a, kubeA := startServer(t, ns)
	b, kubeB := startServer(t, ns)
	reg := prometheus.NewRegistry()
	var cms *fleet.Cache[*corev1.ConfigMap]
	var cancelled atomic.Int32
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(ctx context.Context, k fleet.Key) (controller.Result, error) {
		c, ok := fleet.ClusterFrom(ctx)
		if !ok {
			return controller.Result{}, nil
		}
		cm, ok := cms.Get(k)
		if !ok {
			return controller.Result{}, nil
		}
		s := corev1ac.Secret(cm.Name, cm.Namespace).WithData(map[string][]byte{"from": []byte(cm.Data["from"])})
		_, err := fleet.Client[*corev1.Secret](c).Apply(ctx, s, metav1.ApplyOptions{FieldManager: "fleet-test", Force: true})
		if context.Cause(ctx) != nil && ctx.Err() != nil && k.Cluster == "b" {
			cancelled.Add(1)
		}
		return controller.Result{}, err
	}), fleet.Options{ProbeInterval: 500 * time.Millisecond,
		Controller: controller.Options[fleet.Key]{Name: "hung", Telemetry: telemetry.Telemetry{Registerer: reg}}})
	if err != nil {
		t.Fatal(err)
	}
	if cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("a", a.Config()); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("b", b.Config()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	create := func(kube kubernetes.Interface, name string) { createConfigMap(t, kube, ns, name) }
	names := []string{"x1", "x2", "x3", "x4"}
	for _, name := range names {
		create(kubeB, name)
	}
	create(kubeA, "before")
	eventually(t, 30*time.Second, "both clusters' Secrets written", func() bool {
		return hasSecret(t, kubeA, ns, "before", "from") && !slices.ContainsFunc(names, func(n string) bool {
			return !hasSecret(t, kubeB, ns, n, "from")
		})
	})

	// b's server stops answering; four of its keys are reconciled again,
	// and their writes hang.
	if err := syscall.Kill(b.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(b.PID(), syscall.SIGCONT) }) // before the server is stopped
	for _, name := range names {
		f.Controller().Queue().Add(fleet.Key{Cluster: "b", ObjectName: object.ObjectName{Namespace: ns, Name: name}})
	}
	eventually(t, 10*time.Second, "b's keys in flight", func() bool { return len(f.Controller().InFlight()) > 0 })
	made := time.Now()
	create(kubeA, "during")
	eventually(t, 30*time.Second, "a's new object reconciled while b hangs", func() bool { return hasSecret(t, kubeA, ns, "during", "from") })
	if d := time.Since(made); d > 5*time.Second {
		t.Errorf("a's new object was reconciled %v after it was made while b's server hung, want it unaffected (≤ 5s)", d)
	}
	checkOneDown(t, f, "a", "b", "its server does not answer", 10*time.Second)
	if ua, ub := metricValue(t, reg, "ctrlkit_fleet_cluster_up", map[string]string{"cluster": "a"}),
		metricValue(t, reg, "ctrlkit_fleet_cluster_up", map[string]string{"cluster": "b"}); ua != 1 || ub != 0 {
		t.Errorf("ctrlkit_fleet_cluster_up: a %v, b %v; want 1 and 0", ua, ub)
	}

	start := time.Now()
	if err := f.Disengage("b"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Disengage of a cluster whose server hangs took %v, want ≤ 5s", d)
	}
	eventually(t, 5*time.Second, "b's reconciles in flight cancelled", func() bool {
		return !slices.ContainsFunc(f.Controller().InFlight(), func(k fleet.Key) bool { return k.Cluster == "b" })
	})
	if cancelled.Load() == 0 {
		t.Error("no reconcile of b saw its context cancelled by the disengage")
	}
	if n := metricValue(t, reg, "ctrlkit_fleet_reconciles_total", map[string]string{"cluster": "b"}); n != -1 {
		t.Errorf("b's reconciles cancelled by its disengage made its series again (%v)", n)
	}
	start = time.Now()
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run returned %v after its context ended, want ≤ 10s", d)
	}
}
