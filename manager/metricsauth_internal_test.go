package manager

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// A flood of made-up tokens from one address spends that address's review
// budget, not a scraper's elsewhere whose token just rotated (a token never
// allowed); the addresses' budgets kept are bounded.
func TestMetricsAuth_aFloodFromOneAddressLeavesOthersTheirReviews(t *testing.T) {
	a, get, reviews, now := scrapedAuth()
	if get("10.0.0.7:4000", "scraper-v1") != 200 {
		t.Fatal("the scraper's first token: not allowed")
	}
	limited := 0
	for i := range 1000 {
		if get("10.0.0.66:5000", fmt.Sprint("made-up-", i)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited != 1000-authReviewBurst || *reviews != 1+authReviewBurst {
		t.Errorf("1,000 made-up tokens from one address: %d answered 429 after %d reviews; want all but %d, %d reviews",
			limited, *reviews, authReviewBurst, 1+authReviewBurst)
	}
	if code := get("10.0.0.7:4001", "scraper-v2"); code != 200 {
		t.Errorf("the scraper's rotated token during the flood: %d, want 200", code)
	}

	// Made-up tokens from ever new addresses, at the overall rate: each
	// reviewed, the budgets of addresses idle long enough forgotten to
	// keep at most authClients.
	before := *reviews
	for i := range authClients + 500 {
		*now = now.Add(time.Second / authReviewRateAll)
		get(fmt.Sprintf("10.1.%d.%d:6000", i/250, i%250), fmt.Sprint("other-", i))
	}
	if n := len(a.clients); n > authClients {
		t.Errorf("%d client budgets kept; want at most %d", n, authClients)
	}
	if *reviews-before != authClients+500 {
		t.Errorf("%d reviews for %d requests from new addresses at the overall rate; want every one", *reviews-before, authClients+500)
	}
}

// A flood from a handful of addresses, each within its own budget, spends
// the budget of all between them; a scraper elsewhere, quiet between its
// scrapes, still has its rotated token reviewed, from a reserve the busy
// addresses cannot reach.
func TestMetricsAuth_aFloodFromAFewAddressesLeavesAQuietScraperItsReviews(t *testing.T) {
	_, get, _, now := scrapedAuth()
	for _, flood := range []struct {
		name            string
		pods, perSecond int
	}{
		{"four Pods, 20 tokens a second each", 4, 20},
		{"six Pods, each at its own budget's rate", 6, authReviewRate},
	} {
		t.Run(flood.name, func(t *testing.T) {
			refused := 0
			for sec := range 30 { // and a scraper's new token every 15 seconds, as a scrape interval
				for i := range flood.perSecond {
					for p := range flood.pods {
						*now = now.Add(time.Second / time.Duration(flood.perSecond*flood.pods+1))
						get(fmt.Sprintf("10.0.%d.%d:4000", len(flood.name), p), fmt.Sprint("made-up-", flood.name, sec, "-", i, "-", p))
					}
				}
				if sec%15 == 0 && get("10.0.9.9:5000", fmt.Sprint("scraper-", flood.name, sec)) != http.StatusOK {
					refused++
				}
				*now = now.Add(time.Second / time.Duration(flood.perSecond*flood.pods+1))
			}
			if refused > 0 {
				t.Errorf("the quiet scraper's new tokens were refused %d times in 30 s of the flood; want none", refused)
			}
		})
	}
}

// scrapedAuth is a metricsAuth over a fake API server that allows the
// tokens "scraper-*" of user prometheus, with its clock stopped at now (no
// budget refills unless the test moves it): get scrapes with token from
// an address, reviews counts the TokenReviews made.
func scrapedAuth() (a *metricsAuth, get func(from, token string) int, reviews *int, now *time.Time) {
	kube := fake.NewClientset()
	reviews, now = new(int), new(time.Time)
	*now = time.Unix(1000, 0)
	kube.PrependReactor("create", "tokenreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		*reviews++
		tr := act.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		tr.Status.Authenticated = strings.HasPrefix(tr.Spec.Token, "scraper-")
		tr.Status.User.Username = "prometheus"
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		sar := act.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "prometheus"
		return true, sar, nil
	})
	a = newMetricsAuth(kube, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "metrics") }),
		slog.New(slog.DiscardHandler))
	a.now = func() time.Time { return *now }
	get = func(from, token string) int {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.RemoteAddr = from
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		return w.Code
	}
	return a, get, reviews, now
}
