package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestMirror_keepsAnOwnedSecretForEveryLabelledConfigMap(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	hc, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	kube, err := kubernetes.NewForConfigAndClient(srv.Config(), hc)
	if err != nil {
		t.Fatal(err)
	}
	// Built before the goroutine: manager.New sets client-go's process-wide
	// hooks once, which must not race with the requests below.
	m, err := newManager(srv.Config(), manager.Options{HTTPAddr: "0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	for name, label := range map[string]string{"yes": "true", "no": "false"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"mirror": label}},
			Data: map[string]string{"greeting": "hello"}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secret := func(name string) (*corev1.Secret, bool) {
		s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		return s, err == nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, ok := secret("yes"); ok && string(s.Data["greeting"]) == "hello" && metav1.GetControllerOf(s).Name == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no owned Secret for the labelled ConfigMap after 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling the server
	}
	if _, ok := secret("no"); ok {
		t.Error("a ConfigMap without the label was mirrored")
	}
}
