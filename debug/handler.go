package debug

import (
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/ctrlkit/ctrlkit/object"
)

// Path is where New's handler expects to be mounted: the page is Path, the JSON
// Path+"/state.json" and Path+"/explain".
const Path = "/debug/ctrlkit"

// ErrUnknownController is what Source.Explain returns for a controller it
// does not have (wrap it to add the names it has).
var ErrUnknownController = errors.New("debug: unknown controller")

// Source is what the page shows: a manager implements it.
type Source interface {
	// State returns the pipeline's state now. It must be safe for
	// concurrent use and cheap: it runs on every poll of every open page.
	State() State
	// Explain explains key of the controller called name, or fails with
	// an error wrapping ErrUnknownController.
	Explain(name string, key object.ObjectName) (Explanation, error)
}

// Options configure New.
type Options struct {
	// Token is the bearer token required from clients that are not on a
	// loopback address. Default: "", only loopback clients are served.
	Token string
}

//go:embed page.html
var page []byte

// New returns the handler of the page, state.json and explain under Path for src. It
// does nothing between requests.
func New(src Source, opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, servePage)
	mux.HandleFunc("GET "+Path+"/{$}", servePage)
	mux.Handle("GET "+Path+"/state.json", guarded(opts.Token, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, src.State())
	}))
	mux.Handle("GET "+Path+"/explain", guarded(opts.Token, func(w http.ResponseWriter, r *http.Request) {
		serveExplain(w, r, src)
	}))
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
		writeError(w, http.StatusBadRequest, "missing parameter controller: explain?controller=NAME&key=NAMESPACE/NAME")
		return
	}
	key, err := object.ParseObjectName(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed key "+quote(raw)+
			": want namespace/name, or name for a cluster-scoped object ("+err.Error()+")")
		return
	}
	e, err := src.Explain(name, key)
	if errors.Is(err, ErrUnknownController) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// guarded serves loopback clients, and others that present token.
func guarded(token string, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackClient(r) {
			next(w, r)
			return
		}
		if token == "" {
			writeError(w, http.StatusForbidden, "the debug endpoints serve loopback clients only (no token configured)")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctrlkit debug"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required: Authorization: Bearer <token>")
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeError(w, http.StatusForbidden, "wrong bearer token")
			return
		}
		next(w, r)
	})
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
