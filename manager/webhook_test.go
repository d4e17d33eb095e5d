package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"
)

func TestManager_servesItsWebhooksToTheAPIServer(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	dir := t.TempDir()
	ca, err := webhook.SelfSigned(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	opts := quiet(t)
	opts.Webhook = webhook.Options{Addr: "127.0.0.1:0", CertDir: dir, Name: "manager-" + ns}
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
			Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
				if _, ok := cm.Data["forbidden"]; ok {
					return nil, field.Forbidden(field.NewPath("data").Key("forbidden"), "not in this namespace")
				}
				return nil, nil
			}}),
		webhook.AddDefaulter(m.Webhooks(), func(_ context.Context, cm *corev1.ConfigMap) error {
			if cm.Labels["owner"] == "" {
				metav1.SetMetaDataLabel(&cm.ObjectMeta, "owner", "nobody")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	addr := m.WebhookAddr(t.Context())
	if addr == "" {
		t.Fatal("no webhook listener")
	}
	cc := webhook.ClientConfig{URL: "https://" + addr, CABundle: ca,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	if err := m.Webhooks().Install(t.Context(), srv.Config(), cc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Webhooks().Uninstall(context.Background(), srv.Config()); err != nil {
			t.Error(err)
		}
	})
	cms := m.Kube().CoreV1().ConfigMaps(ns)
	_, err = cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "no"},
		Data: map[string]string{"forbidden": "x"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `data[forbidden]: Forbidden: not in this namespace`) {
		t.Fatalf("create of a forbidden ConfigMap: %v, want the validator's field error", err)
	}
	cm, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "yes"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels["owner"] != "nobody" {
		t.Errorf("labels %v, want the defaulted owner", cm.Labels)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	_, body := get(t, base+"/debug/ctrlkit/state.json")
	var st debug.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Webhooks == nil || st.Webhooks.Addr != addr || st.Webhooks.Certificate.Subject != "CN=127.0.0.1" ||
		len(st.Webhooks.Hooks) != 2 {
		t.Fatalf("the debug page's webhooks: %+v", st.Webhooks)
	}
	if h := st.Webhooks.Hooks[1]; h.Path != "/validate--v1-configmap" || h.Type != "validating" || h.Rejections != 1 || h.Requests < 2 {
		t.Errorf("the debug page's validator: %+v", h)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `ctrlkit_webhook_rejections_total{webhook="/validate--v1-configmap"} 1`) {
		t.Errorf("/metrics lacks the rejection:\n%s", grep(metrics, "webhook"))
	}
}

func TestManager_aRegisteredWebhookWithoutACertificateFailsRun(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddDefaulter(m.Webhooks(), func(context.Context, *corev1.Secret) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err = m.Run(t.Context())
	if !errors.Is(err, webhook.ErrNoCertDir) || !strings.Contains(err.Error(), "/mutate--v1-secret") {
		t.Fatalf("Run: %v, want ErrNoCertDir naming the webhook", err)
	}
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
