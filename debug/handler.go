package debug

import (
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
)

// Path is where New's handler expects to be mounted: the page is Path, the JSON
// Path+"/state.json" and Path+"/explain".
const Path = "/debug/ctrlkit"

// ErrUnknownController is what Source.Explain returns for a controller it
// does not have (wrap it to add the names it has); ErrMalformedKey for a
// key that is not one of the controller's (wrap it to say what is).
var (
	ErrUnknownController = errors.New("debug: unknown controller")
	ErrMalformedKey      = errors.New("debug: malformed key")
)

// Source is what the page shows: a manager implements it.
type Source interface {
	// State returns the pipeline's state now. It must be safe for
	// concurrent use and cheap: it runs on every poll of every open page.
	State() State
	// Explain explains key of the controller called name, as the
	// controller's keys print ("namespace/name", "name"; a fleet's
	// "cluster/namespace/name"), or fails with an error wrapping
	// ErrUnknownController or ErrMalformedKey.
	Explain(name, key string) (Explanation, error)
}

// Options configure New and Guard.
type Options struct {
	// Token, when set, is the bearer token required from every client,
	// loopback ones included (a proxy in the same Pod relays remote
	// clients over loopback). Default: "", only loopback clients naming a
	// trusted host (see Hosts) and relayed by no proxy are served.
	Token string
	// Hosts are the names, besides localhost and the loopback addresses,
	// that a loopback client may give in its Host header and still be
	// served when no token is configured: typically the host of the
	// listen address. A loopback request naming another host is how a web
	// page reaches a local server through DNS rebinding, so it is refused
	// (403). Compared without the port, ignoring case.
	Hosts []string
}

//go:embed page.html
var page []byte

// New returns the handler of the page, state.json and explain under Path for src. It
// does nothing between requests.
func New(src Source, opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, servePage)
	mux.HandleFunc("GET "+Path+"/{$}", servePage)
	mux.Handle("GET "+Path+"/state.json", Guard(opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, src.State())
	})))
	mux.Handle("GET "+Path+"/explain", Guard(opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveExplain(w, r, src)
	})))
	return mux
}

func servePage(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// Everything the page needs is in it: it may load and connect nowhere
	// but its own origin.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "+
		"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(page)
}

func serveExplain(w http.ResponseWriter, r *http.Request, src Source) {
	name, raw := r.URL.Query().Get("controller"), r.URL.Query().Get("key")
	if name == "" {
		writeError(w, http.StatusBadRequest, "missing parameter controller: explain?controller=NAME&key=NAMESPACE/NAME "+
			"(a cluster-scoped object's key is NAME; a fleet's, CLUSTER/NAMESPACE/NAME)")
		return
	}
	e, err := src.Explain(name, raw)
	if errors.Is(err, ErrUnknownController) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if errors.Is(err, ErrMalformedKey) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// Guard serves next to the clients allowed to read debug data. With
// opts.Token set, those presenting it as a bearer token (compared in
// constant time), wherever they connect from: a proxy in the same Pod (a
// mesh's sidecar, kube-rbac-proxy) relays remote clients over loopback, so
// loopback proves nothing once a token is configured. Without a token,
// loopback clients whose Host header is localhost, a loopback address or
// one of opts.Hosts, unless the request carries a proxy's forwarding
// header (Forwarded, X-Forwarded-For, X-Real-Ip, X-Envoy-*): it was relayed
// for someone else. Others get 401 (no token sent) or 403 (a wrong token,
// or none configured), with a JSON error. The manager puts state.json,
// explain and pprof behind it.
func Guard(opts Options, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.Token == "" {
			switch {
			case !loopbackClient(r):
				writeError(w, http.StatusForbidden, "the debug endpoints serve loopback clients only (no token configured)")
			case forwarded(r.Header):
				writeError(w, http.StatusForbidden, "the request was relayed by a proxy (it carries a forwarding header): "+
					"refused without a token, as from beyond loopback")
			case !TrustedHost(r.Host, opts.Hosts):
				writeError(w, http.StatusForbidden, "the Host header "+quote(r.Host)+" is not localhost, a loopback "+
					"address or the listener's host: refused without a token (DNS rebinding)")
			default:
				next.ServeHTTP(w, r)
			}
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctrlkit debug"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required (a token is configured: every client, "+
				"loopback included, sends it): Authorization: Bearer <token>; in a browser, open the page as "+
				Path+"#token=<token>")
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(opts.Token)) != 1 {
			writeError(w, http.StatusForbidden, "wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// forwarded reports a request that names a client it was relayed for: the
// headers proxies add (RFC 7239's Forwarded, the de facto X-Forwarded-For
// and X-Real-Ip) or any of Envoy's.
func forwarded(h http.Header) bool {
	for k := range h {
		switch {
		case k == "Forwarded", k == "X-Forwarded-For", k == "X-Real-Ip", strings.HasPrefix(k, "X-Envoy-"):
			return true
		}
	}
	return false
}

// loopbackClient reports a request from a loopback address.
func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TrustedHost reports whether a Host header (with or without a port) names
// this machine's loopback interface: "localhost", an address of 127.0.0.0/8
// or ::1, or, ignoring case, one of hosts. An empty header is not trusted.
func TrustedHost(header string, hosts []string) bool {
	host := header
	if h, _, err := net.SplitHostPort(header); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // "[::1]" without a port
	}
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, h := range hosts {
		if h != "" && strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

// IsLoopbackAddr reports whether a listen address ("host:port") binds
// loopback interfaces only: an IP address of the loopback range or
// "localhost". An empty host (every interface) is not.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is the JSON of a failed request.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
