package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/manager"
)

// env is a real kube-apiserver with etcd, one for the whole package,
// started by the first test that asks for it and stopped after the last.
var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestGreeter_greetsEveryLabelledConfigMapAndFollowsChanges(t *testing.T) {
	srv := env.Get(t)      // fails the test if the server cannot start
	ns := srv.Namespace(t) // a namespace of this test's own
	startGreeter(t, srv, ns)
	kube := kubernetes.NewForConfigOrDie(srv.Config())

	create(t, kube, ns, "world", "World", map[string]string{"hello": "true"})
	create(t, kube, ns, "quiet", "Nobody", nil) // not labelled: not the greeter's
	waitForGreeting(t, kube, ns, "world", "Hello, World!")

	cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "world", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["name"] = "Gopher"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForGreeting(t, kube, ns, "world", "Hello, Gopher!")

	quiet, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "quiet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := quiet.Data["greeting"]; ok {
		t.Errorf("an unlabelled ConfigMap was greeted: %q", g)
	}
}

// startGreeter runs the greeter on srv, watching namespace ns only, until the test ends.
func startGreeter(t *testing.T, srv *apiserver.Server, ns string) {
	t.Helper()
	m, err := manager.New(srv.Config(), manager.Options{
		HTTPAddr: "0",                           // no HTTP listener in tests
		Logger:   slog.New(slog.DiscardHandler), // quiet
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(m, ns); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func create(t *testing.T, kube kubernetes.Interface, ns, name, who string, labels map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Data:       map[string]string{"name": who},
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForGreeting reads the ConfigMap until it carries want, for up to 30 seconds.
func waitForGreeting(t *testing.T, kube kubernetes.Interface, ns, name, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = cm.Data["greeting"]
			return got == want, nil
		})
	if err != nil {
		t.Fatalf("greeting of %s = %q, want %q: %v", name, got, want, err)
	}
}
