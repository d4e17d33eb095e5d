package webhook_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/internal/testapi"
	v1 "github.com/ctrlkit/ctrlkit/internal/testapi/v1"
	v2 "github.com/ctrlkit/ctrlkit/internal/testapi/v2"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/webhook"
)

const (
	validatePath = "/validate-gadgets-webhook-ctrlkit-test-v2-gadget"
	mutatePath   = "/mutate-gadgets-webhook-ctrlkit-test-v2-gadget"
)

// newServer returns a server with the Gadget hooks of the API server test,
// served in process (no TLS: the handlers are what these tests look at).
func newServer(t *testing.T, def webhook.Defaulter[*v2.Gadget]) *webhook.Server {
	t.Helper()
	return newServerWith(t, def, webhook.Options{})
}

// newServerWith is newServer with opts (its Scheme and CertDir are set).
func newServerWith(t *testing.T, def webhook.Defaulter[*v2.Gadget], opts webhook.Options) *webhook.Server {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	opts.Scheme, opts.CertDir = scheme, t.TempDir()
	s, err := webhook.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddValidator(s, webhook.Validator[*v2.Gadget]{Create: validateGadget}); err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddDefaulter(s, def); err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddConversion[*v2.Gadget](s, &v1.Gadget{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// review returns an AdmissionReview of a create of obj as kind.
func review(kind metav1.GroupVersionKind, obj string) string {
	r := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID("u1"), Kind: kind, Operation: admissionv1.Create, Name: "g",
			Namespace: "ns"}}
	if obj != "" {
		r.Request.Object.Raw = []byte(obj)
	}
	b, _ := json.Marshal(r)
	return string(b)
}

var gadgetKind = metav1.GroupVersionKind{Group: "gadgets.webhook.ctrlkit.test", Version: "v2", Kind: "Gadget"}

// post sends body to path and returns the status and the body.
func post(t *testing.T, h http.Handler, path, contentType, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestServer_badInputIsA4xxNamingWhatIsWrong(t *testing.T) {
	s := newServer(t, defaultGadget)
	for _, tc := range []struct {
		name, path, contentType, body string
		code                          int
		says                          string
	}{
		{"malformed JSON", validatePath, "application/json", `{"request":`, 400, "malformed AdmissionReview"},
		{"no request", validatePath, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400,
			"has no request"},
		{"not JSON", validatePath, "text/plain", review(gadgetKind, `{}`), 415, `want application/json`},
		{"a wrong kind", validatePath, "application/json",
			review(metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, `{}`), 400, "this path serves gadgets.webhook.ctrlkit.test/v2, Kind=Gadget, the request is for /v1, Kind=Pod"},
		{"an unregistered path", "/validate-apps-v1-deployment", "application/json", review(gadgetKind, `{}`), 404,
			"nothing is registered at /validate-apps-v1-deployment; registered: /convert, " + mutatePath + ", " + validatePath},
		{"an object that does not decode", validatePath, "application/json",
			review(gadgetKind, `{"spec":{"replicas":"three"}}`), 400, "the request's object does not decode as Gadget"},
		{"a create without an object", mutatePath, "application/json", review(gadgetKind, ``), 400, "the request has no object"},
		{"a malformed ConversionReview", webhook.ConvertPath, "application/json", `[`, 400, "malformed ConversionReview"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, s, tc.path, tc.contentType, tc.body)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("answered %d %q, want %d saying %q", code, body, tc.code, tc.says)
			}
		})
	}
	req := httptest.NewRequest(http.MethodGet, validatePath, nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET answered %d, want 405", rec.Code)
	}
}

// The panic's value may hold what the handler was looking at: it goes to
// the log, with the stack, and the client learns only that it failed.
func TestServer_aPanickingHandlerAnswers500AndTheServerGoesOn(t *testing.T) {
	panicky := func(_ context.Context, g *v2.Gadget) error {
		if g.Name == "boom" {
			panic("the defaulter broke on secret s3cr3t")
		}
		return defaultGadget(context.Background(), g)
	}
	var log strings.Builder
	s := newServerWith(t, panicky, webhook.Options{Telemetry: telemetry.Telemetry{Logger: slog.New(slog.NewTextHandler(&log, nil))}})
	code, body := post(t, s, mutatePath, "application/json", review(gadgetKind, `{"metadata":{"name":"boom"}}`))
	if code != http.StatusInternalServerError || !strings.Contains(body, "the handler of "+mutatePath+" failed") {
		t.Fatalf("answered %d %q, want 500 saying the handler failed", code, body)
	}
	if strings.Contains(body, "s3cr3t") || strings.Contains(body, "broke") {
		t.Errorf("the answer %q holds the panic's message", body)
	}
	if !strings.Contains(log.String(), "the defaulter broke on secret s3cr3t") || !strings.Contains(log.String(), "server_test.go") {
		t.Errorf("the log lacks the panic or its stack:\n%s", log.String())
	}
	code, body = post(t, s, mutatePath, "application/json", review(gadgetKind, `{"metadata":{"name":"fine"}}`))
	if code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("after the panic: %d %q", code, body)
	}
}

func TestDefaulter_patchTurnsTheSentObjectIntoTheDefaultedOne(t *testing.T) {
	def := func(_ context.Context, g *v2.Gadget) error {
		g.Spec.Replicas = 1
		if g.Labels == nil {
			g.Labels = map[string]string{}
		}
		g.Labels["a/b~c"] = "x" // a member name a JSON pointer escapes
		delete(g.Annotations, "drop")
		return nil
	}
	s := newServer(t, def)
	sent := `{"apiVersion":"gadgets.webhook.ctrlkit.test/v2","kind":"Gadget","metadata":{"name":"g",` +
		`"annotations":{"drop":"me","keep":"me"}},"spec":{"container":{"image":"nginx"}},"unknownToTheType":{"kept":true}}`
	code, body := post(t, s, mutatePath, "application/json", review(gadgetKind, sent))
	if code != http.StatusOK {
		t.Fatalf("answered %d %q", code, body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if out.Response.UID != "u1" || !out.Response.Allowed || out.Response.PatchType == nil {
		t.Fatalf("response %+v, want allowed with a patch for uid u1", out.Response)
	}
	patch, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply([]byte(sent))
	if err != nil {
		t.Fatalf("the patch %s does not apply to the sent object: %v", out.Response.Patch, err)
	}
	var got map[string]any
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"gadgets.webhook.ctrlkit.test/v2","kind":"Gadget","metadata":{"annotations":{"keep":"me"},` +
		`"labels":{"a/b~c":"x"},"name":"g"},"spec":{"container":{"image":"nginx"},"replicas":1},"unknownToTheType":{"kept":true}}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("patched:\n %s\nwant\n %s", b, want)
	}
}

func TestRoundTrip_findsAConversionThatLosesAField(t *testing.T) {
	g := &v1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Labels: map[string]string{"a": "b"}},
		Spec: v1.GadgetSpec{Replicas: 3, Image: "nginx"}}
	if err := webhook.RoundTrip[*v2.Gadget](g); err != nil {
		t.Fatal(err)
	}
	if err := webhook.RoundTrip[*v2.Gadget](&lossy{*g}); err == nil || !strings.Contains(err.Error(), "changed the object") {
		t.Fatalf("a conversion that drops the image: %v, want the difference", err)
	}
}

// lossy is a v1 Gadget whose conversion forgets the image.
type lossy struct{ v1.Gadget }

func (l *lossy) ConvertFrom(hub *v2.Gadget) error {
	err := l.Gadget.ConvertFrom(hub)
	l.Spec.Image = ""
	return err
}

func (l *lossy) DeepCopyObject() runtime.Object { return &lossy{*l.Gadget.DeepCopy()} }

// A review's object decodes as the API server and client-go decode it:
// field names match exactly, so a key that differs only in case (which
// encoding/json would take, the last one winning) is not what the
// validator sees.
func TestServer_decodesFieldNamesCaseSensitively(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := testapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewServer(webhook.Options{Scheme: scheme, CertDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	err = webhook.AddValidator(s, webhook.Validator[*v2.Gadget]{Create: func(_ context.Context, g *v2.Gadget) (webhook.Warnings, error) {
		seen <- g.Name + "," + g.Namespace
		return nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, s, validatePath, "application/json",
		review(gadgetKind, `{"metadata":{"name":"g","namespace":"ns","Name":"evil","NAMESPACE":"kube-system"}}`))
	if code != http.StatusOK {
		t.Fatalf("answered %d %s", code, body)
	}
	if got := <-seen; got != "g,ns" {
		t.Errorf("the validator saw name,namespace %q, want %q: keys differing in case were taken", got, "g,ns")
	}
}
