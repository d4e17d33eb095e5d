package manager

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The reviews of a token are remembered: allowed for authAllowTTL, refused
// for authDenyTTL, at most authCacheSize tokens; the API server is asked
// once per token and period, not per scrape.
func TestMetricsAuth_remembersReviewsForAWhileAndBoundsTheirNumber(t *testing.T) {
	kube := fake.NewClientset()
	reviews := 0
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		tr.Status.Authenticated = tr.Spec.Token != "unknown"
		tr.Status.User.Username = "user-" + tr.Spec.Token
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "user-reader" && sar.Spec.NonResourceAttributes.Path == "/metrics"
		return true, sar, nil
	})
	now := time.Unix(1000, 0)
	a := newMetricsAuth(kube, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "metrics") }),
		slog.New(slog.DiscardHandler))
	a.now = func() time.Time { return now }
	get := func(token string) int {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		return w.Code
	}
	for _, tc := range []struct {
		token   string
		code    int
		reviews int
	}{
		{"", 401, 0}, {"unknown", 401, 1}, {"unknown", 401, 1}, {"other", 403, 2}, {"reader", 200, 3}, {"reader", 200, 3},
	} {
		if got := get(tc.token); got != tc.code || reviews != tc.reviews {
			t.Fatalf("token %q: %d after %d reviews, want %d after %d", tc.token, got, reviews, tc.code, tc.reviews)
		}
	}
	now = now.Add(authDenyTTL)
	if get("other") != 403 || get("reader") != 200 || reviews != 4 {
		t.Fatalf("authDenyTTL later: %d reviews, want 4 (the refusal asked again, the allowance remembered)", reviews)
	}
	now = now.Add(authAllowTTL)
	if get("reader") != 200 || reviews != 5 {
		t.Fatalf("authAllowTTL later: %d reviews, want 5", reviews)
	}

	// A flood of made-up tokens: reviewed at the rate (here, with the
	// clock stopped, the burst), the rest answered 429; the scraper's
	// allowance stays, and when it expires its token is reviewed again
	// however many the flood used up.
	before, limited := reviews, 0
	for i := range 3 * authCacheSize {
		if get(fmt.Sprint("made-up-", i)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if reviews-before != authReviewBurst || limited != 3*authCacheSize-authReviewBurst {
		t.Errorf("a flood of %d made-up tokens: %d reviews, %d answered 429; want %d reviews, the rest 429",
			3*authCacheSize, reviews-before, limited, authReviewBurst)
	}
	if get("reader") != 200 || reviews-before != authReviewBurst {
		t.Errorf("the scraper during the flood: want 200 from its remembered allowance, no review")
	}
	now = now.Add(authAllowTTL)
	if get("reader") != 200 || reviews-before != authReviewBurst+1 {
		t.Errorf("the scraper after its allowance expired, the limiter used up: want 200 after one review")
	}
	now = now.Add(time.Minute) // the limiter fills again: the made-up tokens are reviewed, and remembered within bounds
	for i := range 3 * authCacheSize {
		get(fmt.Sprint("made-up-", i))
		now = now.Add(time.Second / authReviewRate)
	}
	if n, m := len(a.allowed), len(a.denied); n > authCacheSize || m > authCacheSize || n != 1 {
		t.Errorf("%d allowances and %d refusals remembered, want the one allowance and at most %d refusals", n, m, authCacheSize)
	}
}
