package apiwrite

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
