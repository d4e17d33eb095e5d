package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// writeJSON answers code with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "webhook: marshalling the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// writeError answers code with msg as text.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// writeBad answers a request that has no review answer: a *badRequest with
// its status, anything else (the server's own failure) with 500.
func writeBad(w http.ResponseWriter, err error) {
	var bad *badRequest
	if errors.As(err, &bad) {
		writeError(w, bad.code, bad.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

// outcome is what instrument learns of a request from its handler.
type outcome struct{ rejected bool }

type outcomeKey struct{}

// markRejected records that the request was answered with a denial.
func markRejected(r *http.Request) {
	if o, ok := r.Context().Value(outcomeKey{}).(*outcome); ok {
		o.rejected = true
	}
}

// statusWriter remembers the status code written, and the start of an
// error's body.
type statusWriter struct {
	http.ResponseWriter
	code int
	msg  string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets an http.ResponseController reach the connection (limit sets
// the body's read deadline through it).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code >= 400 && w.msg == "" {
		w.msg = strings.TrimSpace(string(b[:min(len(b), 300)]))
	}
	return w.ResponseWriter.Write(b)
}

// instrument counts and times the requests of path, and answers 500 when
// the handler panics: the panic is logged with its stack and counted, and
// the server goes on. The answer does not say what the panic said: its
// value may hold what the handler was looking at (a Secret's data, say).
func (s *Server) instrument(path string, c *counts, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		o := &outcome{}
		r = r.WithContext(withOutcome(r.Context(), o))
		sw := &statusWriter{ResponseWriter: w}
		s.metrics.inFlight(path, 1)
		defer func() {
			s.metrics.inFlight(path, -1)
			p := recover()
			if p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.opts.Log().Error("webhook: handler panicked", "path", path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				s.metrics.panicked(path)
				if sw.code == 0 {
					writeError(sw, http.StatusInternalServerError, fmt.Sprintf("webhook: the handler of %s failed "+
						"(it panicked; the server's log has the panic and its stack)", path))
				}
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			s.metrics.served(path, strconv.Itoa(code), o.rejected, time.Since(start))
			c.record(code, o.rejected, p != nil, sw.msg)
		}()
		h.ServeHTTP(sw, r)
	})
}

func withOutcome(ctx context.Context, o *outcome) context.Context {
	return context.WithValue(ctx, outcomeKey{}, o)
}
