package manager_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/ctrlkit/ctrlkit/internal/certs"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// The manager keeps its webhook certificates in a Secret, without
// cert-manager: it makes the Secret, serves its certificate, writes the
// authority into the webhook configuration (applied without one), renews
// a serving certificate about to expire and a lost authority (the new one
// joins the bundle first, and signs only once settled), all while the API
// server keeps calling the webhook: no request refused, no restart.
func TestWebhookCerts_madeServedInjectedAndRotatedWithoutARefusal(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	secret := object.ObjectName{Namespace: ns, Name: "webhook-certs"}
	opts := quiet(t)
	opts.HTTPAddr = "0"
	opts.Webhook = webhook.Options{Addr: "127.0.0.1:0", Name: "certs-" + ns}
	opts.WebhookCerts = manager.WebhookCerts{Secret: secret, Hosts: []string{"127.0.0.1"}, CASettle: 2 * time.Second}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
		Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
			if _, ok := cm.Data["forbidden"]; ok {
				return nil, field.Forbidden(field.NewPath("data").Key("forbidden"), "refused by the webhook")
			}
			return nil, nil
		}}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	addr := m.WebhookAddr(t.Context())
	// The configuration as the manifests leave it: no caBundle.
	vwc, _, err := m.Webhooks().Configurations(webhook.ClientConfig{URL: "https://" + addr,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})
	cms := admin.CoreV1().ConfigMaps(ns)
	refused := func() error {
		_, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "no-"},
			Data: map[string]string{"forbidden": "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "refused by the webhook") {
			return nil
		}
		return fmt.Errorf("create of a forbidden ConfigMap: %v, want the webhook's refusal", err)
	}
	eventuallyErr(t, time.Minute, "the API server calling the webhook with the injected authority", refused)

	// 0. The configuration written again without its bundle (a replace by
	// a deploy tool): the bundle is back within seconds, not at the next
	// minute's pass.
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), vwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(t.Context(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	eventuallyErr(t, 10*time.Second, "the bundle written back into the configuration", func() error {
		v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), vwc.Name, metav1.GetOptions{})
		if err == nil && len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			err = fmt.Errorf("no bundle %s after the wipe", time.Since(wiped).Round(time.Millisecond))
		}
		return err
	})
	eventuallyErr(t, time.Minute, "the API server calling the webhook again", refused)

	// From now on, a request every 20ms: each must reach the webhook.
	var (
		wg      sync.WaitGroup
		calls   atomic.Int64
		mu      sync.Mutex
		failure []string
	)
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := refused(); err != nil {
				mu.Lock()
				failure = append(failure, err.Error())
				mu.Unlock()
			}
			calls.Add(1)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		if len(failure) > 0 {
			t.Errorf("%d of %d requests during the rotations failed, first: %s", len(failure), calls.Load(), failure[0])
		}
	}()

	// 1. The serving certificate replaced by one about to expire (same
	// authority): the manager renews it; the bundle stays.
	// The manager writes the Secret too (its annotations): each change is
	// made on the latest version, again after a conflict.
	change := func(fn func(*corev1.Secret)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := admin.CoreV1().Secrets(ns).Get(t.Context(), secret.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			fn(s)
			_, err = admin.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var bundle []byte
	change(func(s *corev1.Secret) {
		bundle = s.Data["ca.crt"]
		s.Data["tls.crt"], s.Data["tls.key"] = signedBy(t, s.Data["ca.crt"], s.Data["ca.key"], time.Hour)
	})
	eventuallyErr(t, time.Minute, "a renewed serving certificate served", func() error {
		leaf := served(t, addr)
		if time.Until(leaf.NotAfter) < 24*time.Hour {
			return fmt.Errorf("served certificate expires at %s", leaf.NotAfter)
		}
		return nil
	})
	if s, err := admin.CoreV1().Secrets(ns).Get(t.Context(), secret.Name, metav1.GetOptions{}); err != nil || string(s.Data["ca.crt"]) != string(bundle) {
		t.Fatalf("the bundle changed with a serving certificate's renewal (%v)", err)
	}

	// 2. The authority's key lost: a new authority joins the bundle beside
	// the old one, and signs the serving certificate once settled.
	change(func(s *corev1.Secret) { delete(s.Data, "ca.key") })
	eventuallyErr(t, time.Minute, "a serving certificate of the new authority, both authorities in the configuration", func() error {
		s, err := admin.CoreV1().Secrets(ns).Get(t.Context(), secret.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cas := certs.Bundle(s.Data["ca.crt"])
		if len(cas) != 2 || string(certs.CertPEM(cas[1].Raw)) != string(bundle) {
			return fmt.Errorf("%d authorities in the bundle, want the new one and the old one", len(cas))
		}
		v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), vwc.Name, metav1.GetOptions{})
		if err != nil || string(v.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) {
			return fmt.Errorf("the configuration's bundle is not the Secret's yet (%v)", err)
		}
		if err := served(t, addr).CheckSignatureFrom(cas[0]); err != nil {
			return fmt.Errorf("the certificate served is not the new authority's: %v", err)
		}
		return nil
	})
	if n := calls.Load(); n < 10 {
		t.Errorf("only %d requests were made during the rotations", n)
	}
}

// served returns the certificate the webhook listener presents.
func served(t *testing.T, addr string) *x509.Certificate {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // looked at, not trusted
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// signedBy returns a serving pair for 127.0.0.1 signed by the authority,
// valid for d.
func signedBy(t *testing.T, caPEM, caKeyPEM []byte, d time.Duration) ([]byte, []byte) {
	b, _ := pem.Decode(caKeyPEM)
	caKey, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certs.Serving(certs.Bundle(caPEM)[0], caKey, []string{"127.0.0.1"}, time.Now(), d)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// eventuallyErr polls cond every 100ms until it returns nil, or fails
// after d with its last error.
func eventuallyErr(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, no %s: %v", d, what, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a real server, not synchronising goroutines
	}
}
