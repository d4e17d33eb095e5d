package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// patches counts the PATCH requests (server-side applies) sent through it.
type patches struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (p patches) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch {
		p.n.Add(1)
	}
	return p.next.RoundTrip(r)
}

// reconciles is how many reconciles the mirror controller finished.
func reconciles(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// A restart over objects already in their desired state writes nothing:
// every reconcile finds the cached Secret holding what it would apply.
// A change made while it runs is still written.
func TestMirror_aRestartOverUnchangedObjectsWritesNothing(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	const objects = 20
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"mirror": "true"}},
			Data: map[string]string{"n": fmt.Sprint(i)}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// runUntil runs a mirror manager until done says so, and returns how
	// many applies it sent.
	runUntil := func(done func(reg *prometheus.Registry) bool, meanwhile func()) int64 {
		var n atomic.Int64
		cfg := srv.Config()
		cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return patches{next: next, n: &n} })
		reg := prometheus.NewRegistry()
		m, err := newManager(cfg, manager.Options{HTTPAddr: "0", Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- m.Run(ctx) }()
		deadline := time.Now().Add(60 * time.Second)
		for !done(reg) {
			if time.Now().After(deadline) {
				t.Fatal("the mirror did not get there in 60s")
			}
			if meanwhile != nil {
				meanwhile()
				meanwhile = nil
			}
			time.Sleep(50 * time.Millisecond) // polling the server and the metrics
		}
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("run: %v", err)
		}
		return n.Load()
	}
	mirrored := func(*prometheus.Registry) bool {
		list, err := kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == objects
	}
	if n := runUntil(mirrored, nil); n < objects {
		t.Fatalf("the first run sent %d applies for %d new objects", n, objects)
	}
	if n := runUntil(func(reg *prometheus.Registry) bool { return reconciles(t, reg) >= objects }, nil); n != 0 {
		t.Errorf("a restart over %d unchanged objects sent %d applies, want none", objects, n)
	}
	changed := func(*prometheus.Registry) bool {
		s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), "cm-3", metav1.GetOptions{})
		return err == nil && string(s.Data["n"]) == "changed"
	}
	change := func() {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "cm-3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["n"] = "changed"
		if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := runUntil(changed, change); n < 1 {
		t.Errorf("a change was mirrored with %d applies", n)
	}
}
