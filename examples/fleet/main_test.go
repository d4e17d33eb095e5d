package main

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/manager"
)

// cluster starts an API server of the test's own (stopped when the test
// ends) and returns it, a client of it and its kubeconfig, which holds its
// CA and token inline: a kubeconfig Secret's value as the provider takes it.
func cluster(t *testing.T) (*apiserver.Server, kubernetes.Interface, []byte) {
	t.Helper()
	srv := apiserver.StartForTest(t, apiserver.Options{})
	kubeconfig, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return srv, apiserver.Client(t, srv.Config()), kubeconfig
}

// A management cluster holds the kubeconfig Secrets of two workload
// clusters: a labelled ConfigMap in each gets its Secret in its own
// cluster. One cluster down stops only itself: the other's reconciles go
// on, and its own resume when it is back. A Secret deleted disengages its
// cluster.
func TestFleet_mirrorsInEveryClusterOfTheManagementClustersSecrets(t *testing.T) {
	managementServer, management, _ := cluster(t)
	eastServer, east, eastConfig := cluster(t)
	_, west, westConfig := cluster(t)
	for _, ns := range []string{"clusters", "apps"} {
		for _, kube := range []kubernetes.Interface{management, east, west} {
			_, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	for name, kubeconfig := range map[string][]byte{"east": eastConfig, "west": westConfig} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"}, Data: map[string][]byte{"value": kubeconfig}}
		if _, err := management.CoreV1().Secrets("clusters").Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manager.New(managementServer.Config(), manager.Options{HTTPAddr: "0"}) // the manager on the management cluster
	if err != nil {
		t.Fatal(err)
	}
	f, err := Setup(m, "clusters")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	for name, kube := range map[string]kubernetes.Interface{"east": east, "west": west} {
		writeConfigMap(t, kube, "greeting", name)
		awaitSecret(t, kube, "greeting", name)
	}

	// East goes down: west's reconciles go on.
	if err := eastServer.Down(); err != nil {
		t.Fatal(err)
	}
	writeConfigMap(t, west, "during-outage", "west")
	awaitSecret(t, west, "during-outage", "west")
	// East is back: its informers list again and its changes are mirrored.
	if err := eastServer.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	writeConfigMap(t, east, "after-outage", "east")
	awaitSecret(t, east, "after-outage", "east")

	// West's Secret deleted: west leaves the fleet (its informers,
	// goroutines, metrics and cache with it).
	if err := management.CoreV1().Secrets("clusters").Delete(t.Context(), "west-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !slices.Equal(f.Clusters(), []string{"east"}); {
		if time.Now().After(deadline) {
			t.Fatalf("clusters %v 30s after west's Secret was deleted, want [east]", f.Clusters())
		}
		time.Sleep(50 * time.Millisecond) // polling the fleet
	}

	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Errorf("Run: %v", err)
	}
}

// writeConfigMap creates in kube the ConfigMap apps/name, labelled
// mirror=true, with hello=value.
func writeConfigMap(t *testing.T, kube kubernetes.Interface, name, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"mirror": "true"}},
		Data: map[string]string{"hello": value}}
	if _, err := kube.CoreV1().ConfigMaps("apps").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// awaitSecret waits up to 30 seconds for kube's Secret apps/name to hold
// hello=value.
func awaitSecret(t *testing.T, kube kubernetes.Interface, name, value string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := kube.CoreV1().Secrets("apps").Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && string(s.Data["hello"]) == value {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Secret %s with hello=%s after 30s (last: %v)", name, value, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a real server
	}
}
