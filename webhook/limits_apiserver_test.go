package webhook_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// A review beyond MaxInFlight is answered 429 with Retry-After, which the
// API server's client honours: the create waits and goes through.
func TestWebhooks_theAPIServerRetriesAReviewAnswered429(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	cfg, ns := srv.Config(), srv.Namespace(t)
	s, err := webhook.NewServer(webhook.Options{CertDir: t.TempDir(), Name: "limits-" + ns, Limits: webhook.Limits{MaxInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	err = webhook.AddValidator(s, webhook.Validator[*corev1.ConfigMap]{Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
		if cm.Name == "held" {
			close(held)
			<-release
		}
		return nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr, _, ca := serveTLS(t, s)
	cc := webhook.ClientConfig{URL: "https://" + addr, CABundle: ca, FailurePolicy: admissionregistrationv1.Fail,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	if err := s.Install(t.Context(), cfg, cc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Uninstall(context.Background(), cfg); err != nil {
			t.Error(err)
		}
	})
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, done chan<- error) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{})
		done <- err
	}
	heldDone, laterDone := make(chan error, 1), make(chan error, 1)
	go create("held", heldDone)
	<-held
	go create("later", laterDone)
	// Polling the server's counts, not synchronising goroutines: the 429
	// goes to the API server, which the test cannot watch.
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Webhooks[0].Errors == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the second review was not answered 429 within 10s")
		}
	}
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatalf("the held create: %v", err)
	}
	if err := <-laterDone; err != nil {
		t.Fatalf("the create answered 429 first: %v, want it retried and allowed", err)
	}
	if st := s.Stats().Webhooks[0]; st.Requests != 3 || st.Errors != 1 {
		t.Errorf("the validator's counts %+v, want 3 requests of which one error (the 429)", st)
	}
}
