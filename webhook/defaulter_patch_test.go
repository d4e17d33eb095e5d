package webhook_test

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/webhook"
)

// A defaulter that sets a field of one container: the stored Pod keeps the
// fields this program's Pod type does not know (a newer server's), at the
// top, in the spec and inside the containers, as the request sent them.
func TestDefaulter_keepsFieldsTheTypeDoesNotKnowInsideLists(t *testing.T) {
	s, err := webhook.NewServer(webhook.Options{CertDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddDefaulter(s, func(_ context.Context, p *corev1.Pod) error {
		if p.Spec.Containers[0].ImagePullPolicy == "" {
			p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	raw := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"},"futureTopLevel":1,` +
		`"spec":{"futurePodField":true,"containers":[{"name":"app","image":"x",` +
		`"securityContext":{"runAsNonRoot":true,"futureHardening":"strict"},"futureContainerField":"keep-me"}]}}`
	r := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID("u1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Create, Name: "p", Namespace: "ns"}}
	r.Request.Object.Raw = []byte(raw)
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	code, out := post(t, s, "/mutate--v1-pod", "application/json", string(body))
	var resp admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(out), &resp); err != nil || code != 200 || resp.Response == nil {
		t.Fatalf("%d %s (%v)", code, out, err)
	}
	p, err := jsonpatch.DecodePatch(resp.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := p.Apply([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"},"futureTopLevel":1,` +
		`"spec":{"futurePodField":true,"containers":[{"name":"app","image":"x","imagePullPolicy":"IfNotPresent",` +
		`"securityContext":{"runAsNonRoot":true,"futureHardening":"strict"},"futureContainerField":"keep-me"}]}}`
	if !jsonpatch.Equal(stored, []byte(want)) {
		t.Errorf("the patch %s stores\n%s\nwant\n%s", resp.Response.Patch, stored, want)
	}
}
