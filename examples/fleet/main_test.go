package main

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

// cluster starts an API server of the test's own and returns a client of
// it and its kubeconfig.
func cluster(t *testing.T) (kubernetes.Interface, []byte) {
	t.Helper()
	srv, err := apiserver.Start(t.Context(), apiserver.Options{})
	if err != nil {
		t.Fatalf("the real API server is required and did not start: %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	kubeconfig, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return apiserver.Client(t, srv.Config()), kubeconfig
}

// A management cluster holds the kubeconfig Secrets of two workload
// clusters: a labelled ConfigMap in each gets its Secret in its own
// cluster.
func TestFleet_mirrorsInEveryClusterOfTheManagementClustersSecrets(t *testing.T) {
	management, _ := cluster(t)
	east, eastConfig := cluster(t)
	west, westConfig := cluster(t)
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
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, management, "clusters") }()

	for name, kube := range map[string]kubernetes.Interface{"east": east, "west": west} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "greeting", Labels: map[string]string{"mirror": "true"}},
			Data: map[string]string{"hello": name}}
		if _, err := kube.CoreV1().ConfigMaps("apps").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, kube := range map[string]kubernetes.Interface{"east": east, "west": west} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			s, err := kube.CoreV1().Secrets("apps").Get(t.Context(), "greeting", metav1.GetOptions{})
			if err == nil && string(s.Data["hello"]) == name {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no Secret greeting with hello=%s in cluster %s after 30s (last: %v)", name, name, err)
			}
			time.Sleep(50 * time.Millisecond) // polling a real server
		}
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Errorf("Run: %v", err)
	}
}
