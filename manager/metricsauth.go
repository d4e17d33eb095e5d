package manager

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"golang.org/x/time/rate"

	"github.com/ctrlkit/ctrlkit/internal/certs"
	"github.com/ctrlkit/ctrlkit/internal/program"
)

// The secured metrics listener (Options.MetricsAddr) serves /metrics over
// HTTPS to clients the API server vouches for, as kubebuilder's scaffold
// does: the bearer token is checked with a TokenReview, and the user it
// names must be allowed get on the non-resource URL /metrics (a
// SubjectAccessReview), which a ClusterRole like
//
//	rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]
//
// grants (Manifests writes one, NAME-metrics-reader). No token answers
// 401, a token the API server does not know 401, a user without that
// permission 403. Answers are remembered per token (a hash of it) for a
// while, so a scrape every few seconds costs no request to the API server;
// refusals for less long, apart from allowances and at most authCacheSize
// of each, so this process's memory is bounded and a flood of made-up
// tokens pushes no scraper's allowance out. Tokens never allowed are
// reviewed at most authReviewRate a second per client address (a burst of
// authReviewBurst) and authReviewRateAll a second in all, others answered
// 429 with Retry-After: each review is two requests under the operator's
// own identity, in its priority-and-fairness flow beside its reconciles and
// its Lease's renewals. So a flood from one address does not hold back a
// scraper elsewhere whose token just rotated (a new token, never allowed),
// and a token allowed before is reviewed again when its allowance expires
// whatever the rates. The budgets of at most authClients addresses are
// kept; beyond them (addresses idle for a while are forgotten first) the
// rest share one. When the budget of all is spent, an address new or with
// no review for authQuietAfter, as a scraper is between scrapes, takes from
// a reserve of authReviewRateQuiet a second that busy addresses cannot
// reach: a flood from a handful of addresses that spends the budget of all
// still leaves a scraper's rotated token its review (a flood would need
// authReviewRateQuiet * authQuietAfter addresses, each quiet in between,
// to spend the reserve too).
const (
	authAllowTTL        = time.Minute
	authDenyTTL         = 10 * time.Second
	authCacheSize       = 1024
	authReviewRate      = 5
	authReviewBurst     = 10
	authReviewRateAll   = 20
	authReviewBurstAll  = 40
	authReviewRateQuiet = 5
	authQuietAfter      = 5 * time.Second
	authClients         = 1024
)

// metricsAuth guards a handler with TokenReview and SubjectAccessReview.
type metricsAuth struct {
	kube kubernetes.Interface
	next http.Handler
	now  func() time.Time
	log  *slog.Logger

	mu      sync.Mutex
	allowed map[[32]byte]authAnswer // answers that allowed
	denied  map[[32]byte]authAnswer // answers that refused
	// Reviews of tokens never allowed: the budget of each client address,
	// of the addresses beyond authClients together, and of all.
	clients  map[string]*authClient
	overflow *rate.Limiter
	all      *rate.Limiter
	quiet    *rate.Limiter // the reserve of quiet addresses, once all's is spent
}

// authAnswer is a remembered review: the status to answer (0: allowed)
// and why, until expires.
type authAnswer struct {
	status  int
	why     string
	expires time.Time
}

func newMetricsAuth(kube kubernetes.Interface, next http.Handler, log *slog.Logger) *metricsAuth {
	return &metricsAuth{kube: kube, next: next, now: time.Now, log: log, allowed: map[[32]byte]authAnswer{},
		denied: map[[32]byte]authAnswer{}, clients: map[string]*authClient{},
		overflow: rate.NewLimiter(authReviewRate, authReviewBurst), all: rate.NewLimiter(authReviewRateAll, authReviewBurstAll),
		quiet: rate.NewLimiter(authReviewRateQuiet, authReviewRateQuiet)}
}

// mayReview takes a review from the budgets of r's client and of all.
func (a *metricsAuth) mayReview(r *http.Request, now time.Time) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.clients[host]
	if !ok {
		if len(a.clients) >= authClients {
			for h, c := range a.clients {
				if c.lim.TokensAt(now) >= authReviewBurst { // idle long enough to have its whole burst back
					delete(a.clients, h)
				}
			}
		}
		if len(a.clients) < authClients {
			c = &authClient{lim: rate.NewLimiter(authReviewRate, authReviewBurst)}
			a.clients[host] = c
		} else {
			c = &authClient{lim: a.overflow} // never quiet: its last review is not kept
		}
	}
	quiet := !c.last.IsZero() && now.Sub(c.last) >= authQuietAfter || !ok && c.lim != a.overflow
	if !c.lim.AllowN(now, 1) {
		return false
	}
	if !a.all.AllowN(now, 1) && !(quiet && a.quiet.AllowN(now, 1)) {
		return false
	}
	c.last = now
	return true
}

// authClient is the review budget of one client address, and when it last
// had a review.
type authClient struct {
	lim  *rate.Limiter
	last time.Time
}

func (a *metricsAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
		http.Error(w, "Unauthorized: a bearer token is needed", http.StatusUnauthorized)
		return
	}
	ans := a.review(r, strings.TrimSpace(token))
	if ans.status == http.StatusInternalServerError {
		a.log.Error("manager: metrics: cannot review a scrape's token", "err", ans.why)
		http.Error(w, "the API server could not review the token", ans.status) // its error stays in the log
		return
	}
	if ans.status != 0 {
		switch ans.status {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, ans.why, ans.status)
		return
	}
	a.next.ServeHTTP(w, r)
}

// review returns the remembered answer for token, or asks the API server.
func (a *metricsAuth) review(r *http.Request, token string) authAnswer {
	key := sha256.Sum256([]byte(r.URL.Path + "\x00" + token)) // an answer is for one path
	now := a.now()
	a.mu.Lock()
	ans, known := a.allowed[key]
	if !known {
		ans = a.denied[key]
	}
	a.mu.Unlock()
	if now.Before(ans.expires) {
		return ans
	}
	if !known && !a.mayReview(r, now) {
		return authAnswer{status: http.StatusTooManyRequests,
			why: "Too many unknown tokens to review at once: retry"}
	}
	ans = a.ask(r, token)
	ttl := authAllowTTL
	if ans.status != 0 {
		ttl = authDenyTTL
	}
	ans.expires = now.Add(ttl)
	if ans.status == http.StatusInternalServerError { // the API server did not answer: ask again next time
		return ans
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ans.status == 0 {
		remember(a.allowed, key, ans, now)
	} else {
		delete(a.allowed, key)
		remember(a.denied, key, ans, now)
	}
	return ans
}

// remember puts ans in m under key, making room first: expired answers go,
// then, if none had, every answer of m.
func remember(m map[[32]byte]authAnswer, key [32]byte, ans authAnswer, now time.Time) {
	if _, ok := m[key]; !ok && len(m) >= authCacheSize {
		for k, v := range m {
			if !now.Before(v.expires) {
				delete(m, k)
			}
		}
		if len(m) >= authCacheSize {
			clear(m)
		}
	}
	m[key] = ans
}

// ask makes the two reviews.
func (a *metricsAuth) ask(r *http.Request, token string) authAnswer {
	ctx := r.Context()
	tr, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authAnswer{status: http.StatusInternalServerError, why: "cannot review the token: " + shorten(err)}
	}
	if !tr.Status.Authenticated {
		return authAnswer{status: http.StatusUnauthorized, why: "Unauthorized: the API server does not accept this token"}
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: "get"}}},
		metav1.CreateOptions{})
	if err != nil {
		return authAnswer{status: http.StatusInternalServerError, why: "cannot review the access: " + shorten(err)}
	}
	if !sar.Status.Allowed {
		return authAnswer{status: http.StatusForbidden,
			why: fmt.Sprintf("Forbidden: %s may not get %s", u.Username, r.URL.Path)}
	}
	return authAnswer{}
}

// selfSignedTLS returns a TLS configuration with a certificate made now,
// signed by its own key, for the secured metrics listener: scrapers
// verify who they talk to by the token exchange, not the certificate
// (Prometheus' insecureSkipVerify, as kubebuilder's ServiceMonitor),
// unless the manifests are patched to mount one.
func selfSignedTLS() (*tls.Config, error) {
	certPEM, keyPEM, err := certs.Serving(nil, nil, []string{program.Name() + "-metrics"}, time.Now(), 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}
