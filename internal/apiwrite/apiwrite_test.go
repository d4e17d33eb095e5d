package apiwrite

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestVerb_namesEachWriteAndNoRead(t *testing.T) {
	for _, tc := range []struct{ method, contentType, want string }{
		{http.MethodGet, "", ""},
		{http.MethodPost, "application/json", "create"},
		{http.MethodPut, "application/json", "update"},
		{http.MethodPatch, "application/merge-patch+json", "patch"},
		{http.MethodPatch, "application/apply-patch+yaml", "apply"},
		{http.MethodDelete, "", "delete"},
	} {
		r := httptest.NewRequest(tc.method, "/api/v1/namespaces/ns/secrets/s", nil)
		r.Header.Set("Content-Type", tc.contentType)
		if got := Verb(r); got != tc.want {
			t.Errorf("Verb(%s %s) = %q, want %q", tc.method, tc.contentType, got, tc.want)
		}
	}
}

// A delete's response names the deleted object's UID in the object it
// carries or in its Status's details, JSON or protobuf; the body stays
// readable, and a Status without details names none.
func TestDeleteResponse_readsTheUIDOfTheObjectOrTheStatusAndPutsTheBodyBack(t *testing.T) {
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
		Details: &metav1.StatusDetails{Name: "s", Kind: "secrets", UID: "u-1"}}
	jsonStatus, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := status.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{Kind: "Status", APIVersion: "v1"}, Raw: raw}
	wrapped, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	protoStatus := append(append([]byte(nil), protoMagic...), wrapped...)
	for _, tc := range []struct {
		name, contentType, body string
		want                    types.UID
	}{
		{"the object", "application/json", `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","uid":"u-2","resourceVersion":"9"}}`, "u-2"},
		{"a JSON Status", "application/json", string(jsonStatus), "u-1"},
		{"a protobuf Status", "application/vnd.kubernetes.protobuf", string(protoStatus), "u-1"},
		{"a Status without details", "application/json", `{"kind":"Status","apiVersion":"v1","status":"Success"}`, ""},
		{"not an API body", "text/plain", "gone", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{Header: http.Header{"Content-Type": {tc.contentType}}, Body: io.NopCloser(strings.NewReader(tc.body))}
			ref := Ref{Name: object.ObjectName{Namespace: "ns", Name: "s"}}
			meta, ok, uid := DeleteResponse(resp, &ref)
			if uid != tc.want {
				t.Errorf("DeleteResponse's UID = %q, want %q", uid, tc.want)
			}
			if isObject := tc.name == "the object"; ok != isObject || (ok && meta.ResourceVersion != "9") {
				t.Errorf("DeleteResponse's metadata = %+v, %v; want the object's only when it carries one", meta, ok)
			}
			if body, _ := io.ReadAll(resp.Body); string(body) != tc.body {
				t.Errorf("the body left for the caller = %q, want it unchanged", body)
			}
		})
	}
}
