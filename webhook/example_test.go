package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fielderr "k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ctrlkit/ctrlkit/webhook"
)

// A defaulter and a validator of Pods, and what the server answers the API
// server's review of a Pod without an image pull policy: a JSON patch that
// sets it. In a program, register them on the manager's server
// (manager.Manager.Webhooks) and the manager serves them; here the
// review is handed to the server directly.
func ExampleAddDefaulter() {
	dir, err := os.MkdirTemp("", "webhook-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if _, err := webhook.SelfSigned(dir, "127.0.0.1"); err != nil { // the serving pair the server needs
		fmt.Println(err)
		return
	}
	s, err := webhook.NewServer(webhook.Options{CertDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = webhook.AddDefaulter(s, func(_ context.Context, p *corev1.Pod) error {
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].ImagePullPolicy == "" {
				p.Spec.Containers[i].ImagePullPolicy = corev1.PullIfNotPresent
			}
		}
		return nil
	})
	if err == nil {
		err = webhook.AddValidator(s, webhook.Validator[*corev1.Pod]{
			Create: func(_ context.Context, p *corev1.Pod) (webhook.Warnings, error) {
				if len(p.Spec.Containers) == 0 {
					return nil, fielderr.Required(fielderr.NewPath("spec", "containers"), "a Pod needs a container")
				}
				return nil, nil
			}})
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.Paths())

	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Create, Namespace: "default", Name: "web"}}
	review.Request.Object.Raw = []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},` +
		`"spec":{"containers":[{"name":"web","image":"nginx"}]}}`)
	body, _ := json.Marshal(review)
	req := httptest.NewRequest(http.MethodPost, "/mutate--v1-pod", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || answer.Response == nil {
		fmt.Println(w.Code, w.Body.String())
		return
	}
	fmt.Println(answer.Response.Allowed, string(answer.Response.Patch))
	// Output:
	// [/mutate--v1-pod /validate--v1-pod]
	// true [{"op":"add","path":"/spec/containers/0/imagePullPolicy","value":"IfNotPresent"}]
}
