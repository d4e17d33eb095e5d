package podcensus_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/examples/podcensus"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestCensus_countsEachNodesPodsByPhaseFromProjections(t *testing.T) {
	srv := env.Get(t)
	census, apps := srv.Namespace(t), srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	ctx := t.Context()
	for _, n := range []string{"n1", "n2"} {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	m, err := manager.New(srv.Config(), manager.Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := podcensus.Setup(m, census); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	pods := kube.CoreV1().Pods(apps)
	pod := func(name, node string, phase corev1.PodPhase) {
		t.Helper()
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = phase
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("a", "n1", corev1.PodRunning)
	pod("b", "n1", corev1.PodPending)
	pod("c", "n2", corev1.PodRunning)
	expect := func(node string, want map[string]string) {
		t.Helper()
		var got map[string]string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := kube.CoreV1().ConfigMaps(census).Get(ctx, "node-"+node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = cm.Data
			return maps.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("census of %s = %v, want %v", node, got, want)
		}
	}
	expect("n1", map[string]string{"total": "2", "Pending": "1", "Running": "1", "Succeeded": "0", "Failed": "0"})
	expect("n2", map[string]string{"total": "1", "Pending": "0", "Running": "1", "Succeeded": "0", "Failed": "0"})

	b, err := pods.Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "c", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	expect("n1", map[string]string{"total": "2", "Pending": "0", "Running": "1", "Succeeded": "1", "Failed": "0"})
	expect("n2", map[string]string{"total": "0", "Pending": "0", "Running": "0", "Succeeded": "0", "Failed": "0"})
}
