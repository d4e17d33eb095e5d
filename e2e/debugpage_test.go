package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fielderr "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// pages reconciles ConfigMaps: "bad-*" fail, "blocker" blocks until
// release is closed, anything else succeeds.
type pages struct{ release chan struct{} }

func (p pages) Reconcile(ctx context.Context, n object.ObjectName) (controller.Result, error) {
	switch {
	case strings.HasPrefix(n.Name, "bad-"):
		return controller.Result{}, fmt.Errorf("cannot render %s: its template is bad", n.Name)
	case n.Name == "blocker":
		select {
		case <-p.release:
		case <-ctx.Done():
		}
	}
	return controller.Result{}, nil
}

// startManager runs a manager with the controller "pages" (one worker) over
// the ConfigMaps of ns, and a validating webhook refusing ConfigMaps of ns
// with a "reject" key, until the test ends, and returns its listener's base
// URL. The blocker's reconcile returns before the manager stops.
func startManager(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	certs := t.TempDir()
	ca, err := webhook.SelfSigned(certs, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(cfg, manager.Options{HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Webhook: webhook.Options{Addr: "127.0.0.1:0", CertDir: certs, Name: ns}})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
		Create: func(_ context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
			if _, ok := cm.Data["reject"]; ok {
				return nil, fielderr.Forbidden(fielderr.NewPath("data").Key("reject"), "this page refuses it")
			}
			return nil, nil
		}}); err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	rec := pages{release: make(chan struct{})}
	if _, err := manager.NewController(m, "pages", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 1}},
		manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	// A fleet offered one cluster whose kubeconfig names a CA file that does
	// not exist: refused, it shows on the page with why.
	broken := &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(certs, "missing.crt")}}
	f, err := manager.NewFleet(m, controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{}, fleet.ProviderFunc(func(ctx context.Context, f *fleet.Fleet) error {
		_ = f.Engage("broken", broken) // refused: Fleet.Refused keeps it with its error
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	t.Cleanup(func() { close(rec.release) }) // runs first
	addr := m.Addr(ctx)
	if addr == "" {
		t.Fatal("the manager did not bind its listener")
	}
	hooks := url.URL{Scheme: "https", Host: m.WebhookAddr(ctx)}
	if err := m.Webhooks().Install(ctx, cfg, webhook.ClientConfig{URL: hooks.String(), CABundle: ca,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Webhooks().Uninstall(context.Background(), cfg); err != nil {
			t.Error(err)
		}
	})
	return "http://" + addr
}

// waitFor polls the page until the JavaScript expression cond is true, or
// fails the test saying what did not happen.
func waitFor(t *testing.T, ctx context.Context, d time.Duration, what, cond string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
		t.Fatalf("after %s, the page does not show %s: %v (page status: %q)", d, what, err, status)
	}
}

// field is a JavaScript expression: the text of the data-field cell in the
// first element matching sel, "" when there is none.
func field(sel, name string) string {
	return fmt.Sprintf(`((document.querySelector(%q) || document).querySelector('[data-field=%q]') || {textContent: ""}).textContent`,
		sel, name)
}

func TestDebugPage_inChromiumOnTheRealServer(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	create := func(name string) {
		t.Helper()
		_, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	create("existing")
	base := startManager(t, srv.Config(), ns)
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+debug.Path)); err != nil {
		t.Fatal(err)
	}

	// Every section renders, from the JSON the page polls.
	inf := `#informers tr[data-informer]`
	waitFor(t, ctx, 30*time.Second, "the synced informer with its one object",
		field(inf, "objects")+` === "1" && `+field(inf, "synced")+` === "yes" && `+
			field(inf, "start")+` === "cold: no snapshot configured"`)
	waitFor(t, ctx, 10*time.Second, "every section: handler, controller, errors, explain form",
		`document.querySelector('#handlers tr[data-handler="pages"]') !== null &&
		 document.querySelector('#controllers tr[data-controller="pages"]') !== null &&
		 document.querySelector('#errors tbody tr') !== null &&
		 document.querySelector('#controller option[value="pages"]') !== null &&
		 document.getElementById("status").textContent.startsWith("updated")`)
	waitFor(t, ctx, 10*time.Second, "the fleet's refused cluster with its error",
		`!document.getElementById("refused").hidden && document.querySelector('#refused [data-refused="broken"]').textContent.includes("missing.crt")`)
	for _, f := range []string{"resourceVersion", "mode", "relist", "watchAge", "scope"} {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](field(inf, f)))
		if err != nil || got == "" || got == "—" {
			t.Errorf("informer column %s = %q (%v)", f, got, err)
		}
	}

	// A created object appears in the counts without a reload.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	create("fresh")
	waitFor(t, ctx, 5*time.Second, "the created ConfigMap in the informer's count", field(inf, "objects")+` === "2"`)
	t.Logf("the created object was counted on the page %s after its create returned", time.Since(created).Round(time.Millisecond))
	waitFor(t, ctx, time.Second, "the same page (no reload)", `window.notReloaded === true`)

	// A failing reconcile shows its error.
	create("bad-1")
	errRow := fmt.Sprintf(`#errors tr[data-key="%s/bad-1"]`, ns)
	waitFor(t, ctx, 15*time.Second, "bad-1's error", field(errRow, "error")+`.includes("its template is bad")`)

	// A ConfigMap the webhook refuses shows in the webhooks section.
	_, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "refused"}, Data: map[string]string{"reject": "x"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "this page refuses it") {
		t.Fatalf("a ConfigMap with a reject key: %v, want the webhook's refusal", err)
	}
	hook := `#webhooks tr[data-webhook="/validate--v1-configmap"]`
	waitFor(t, ctx, 10*time.Second, "the webhook with its rejection",
		`!document.getElementById("webhooks-section").hidden && `+field(hook, "rejections")+` === "1" && `+
			field(hook, "type")+` === "validating" && document.getElementById("webhooks-cert").textContent.includes("127.0.0.1")`)

	// Explain answers for a queued key: the only worker is held by the
	// blocker, so a key created after it waits in the queue.
	create("blocker")
	waitFor(t, ctx, 15*time.Second, "the blocker being processed",
		field(`#controllers tr[data-controller="pages"]`, "processing")+`.includes("blocker")`)
	create("queued-1")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#key"), ns+"/queued-1"),
		chromedp.Click(chromedp.CSS("#explain-button"))); err != nil {
		t.Fatal(err)
	}
	res := "#explain-result"
	waitFor(t, ctx, 15*time.Second, "queued-1 explained as queued, cached, added by its add event",
		field(res, "queued")+`.startsWith("yes, position") && `+field(res, "cached")+`.startsWith("yes, resource version") && `+
			field(res, "why")+`.includes("add of configmaps/v1")`)
	summary, _ := chromedp.Run(ctx, chromedp.Evaluate[string](field(res, "summary")))
	t.Logf("explain %s/queued-1: %s", ns, summary)

	// Explain the failing key: its attempts and last error.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#key"), ns+"/bad-1"),
		chromedp.Click(chromedp.CSS("#explain-button"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Second, "bad-1 explained with its attempts and error",
		field(res, "lastError")+`.includes("its template is bad") && Number(`+field(res, "attempts")+`) > 0`)

	// A malformed key is refused with the server's message.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#key"), "no-name/"),
		chromedp.Click(chromedp.CSS("#explain-button"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Second, "the malformed key's error", field(res, "error")+`.includes("malformed key")`)
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#key"), ns+"/queued-1"),
		chromedp.Click(chromedp.CSS("#explain-button"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Second, "queued-1 explained again", field(res, "queued")+`.startsWith("yes, position")`)

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "debug-page.png", shot)
	if len(shot) < 10_000 {
		t.Errorf("the screenshot has %d bytes; a rendered page has more", len(shot))
	}
}
