package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/jsoncost"
)

// Limits bound what a client of the webhook listener can hold: how long a
// connection or a request stays open, and how many reviews and bytes of
// their bodies are being answered at once. Both the manager's listener and
// Serve use them (HTTPServer). The zero value means the defaults.
type Limits struct {
	// ReadHeaderTimeout bounds the TLS handshake and the reading of a
	// request's headers. Default: 10s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the reading of a review's body, from when its
	// headers have been read; a body still incomplete then is answered
	// 408. The API server sends a body it holds in memory. Default: 10s.
	BodyTimeout time.Duration
	// RequestTimeout bounds a whole request: the server stops reading and
	// writing the connection's request then, and the handler's context
	// ends with ErrRequestTimeout. Default: 30s, the longest an API server
	// waits for a webhook (its TimeoutSeconds is at most 30).
	RequestTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has carried no
	// request for that long. Default: 90s.
	IdleTimeout time.Duration
	// MaxInFlight bounds the reviews being answered at once (their bodies
	// read); one more is answered 429 with Retry-After (the API server's
	// client retries it). A review counts from when its body has arrived:
	// connections that declare a body and send it slowly, or not at all,
	// hold no place. Default: 64.
	MaxInFlight int
	// MaxBytesInFlight bounds the bodies of the reviews being read or
	// answered at once, and what decoding them takes: a review counts the
	// bytes of its body that have arrived, as they arrive, and once it
	// has arrived, an estimate of its size decoded (its bytes, 512 for
	// each array element and each object outside an array, 32 for each
	// further object member, managedFields' fieldsV1 as bytes: an array
	// of "{}," or of null decodes into structs a hundred times its bytes),
	// until its answer is written. One that does not fit beside the
	// others is answered 429 with Retry-After (and its connection closed
	// when its body was still arriving); a review counts at most the
	// bound, so one alone is served, unless its elements and objects
	// alone are estimated at more than twice the bound: that one is
	// answered 413 (a legitimate review that large, a conversion of
	// thousands of objects at once or an object of tens of thousands of
	// list entries, needs a larger bound). What a client declares
	// (Content-Length) costs nothing until it is sent: a stalled
	// connection holds only what it sent. The reviews' heap stays at a
	// few times the bound (decoding, a defaulter's patch, garbage not yet
	// collected): 30 concurrent 6 MiB reviews to a defaulter peaked at 64
	// MiB with the default, 858 MiB without a bound; three 5 MiB reviews
	// of empty managedFields entries took 1.3 GiB before the estimate,
	// and are now refused. Default: 16 MiB (two of the largest reviews).
	MaxBytesInFlight int64
}

// ErrRequestTimeout is the cause of a handler's context that ended because
// the request took Limits.RequestTimeout.
var ErrRequestTimeout = errors.New("webhook: the request took longer than Limits.RequestTimeout")

// maxHeaderBytes bounds a request's headers (431 beyond): the API server
// sends a handful.
const maxHeaderBytes = 64 << 10

// maxBody bounds a review: the API server's largest object (3 MiB in etcd)
// twice (old and new), with room for the envelope.
const maxBody = 7 << 20

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.BodyTimeout, 10*time.Second)
	def(&l.RequestTimeout, 30*time.Second)
	def(&l.IdleTimeout, 90*time.Second)
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 64
	}
	if l.MaxBytesInFlight <= 0 {
		l.MaxBytesInFlight = 16 << 20
	}
	return l
}

// HTTPServer returns a new http.Server that serves s within its Limits,
// with its TLSConfig; serve it on tls.NewListener(ln, srv.TLSConfig). Serve
// uses it, and so does the manager: both listeners have the same limits.
// The server's own errors (a failed TLS handshake) go to the Logger at
// WARN.
func (s *Server) HTTPServer() *http.Server {
	l := s.opts.Limits
	return &http.Server{Handler: s, TLSConfig: s.TLSConfig(),
		ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.RequestTimeout, WriteTimeout: l.RequestTimeout,
		IdleTimeout: l.IdleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.opts.Log().Handler(), slog.LevelWarn)}
}

// reviewFunc answers one review whose body has been read.
type reviewFunc func(w http.ResponseWriter, r *http.Request, body []byte)

// limit admits a review within the server's limits and reads its body: a
// POST of JSON, at most maxBody bytes, within BodyTimeout, its bytes
// charged to MaxBytesInFlight as they arrive; then it takes a place among
// MaxInFlight; the handler's context ends after RequestTimeout. Beyond
// either bound the answer is 429 with Retry-After.
func (s *Server) limit(h reviewFunc) http.Handler {
	l := s.opts.Limits
	busy := func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("webhook: too many reviews in flight (at most %d, "+
			"of %d bytes together); retry", l.MaxInFlight, l.MaxBytesInFlight))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkPost(r); err != nil {
			writeBad(w, err)
			return
		}
		if size := r.ContentLength; size > maxBody {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("webhook: the review has %d bytes, more than %d", size, maxBody))
			return
		}
		ctx, cancel := context.WithTimeoutCause(r.Context(), l.RequestTimeout, ErrRequestTimeout)
		defer cancel()
		sh := &share{f: s.inflight}
		defer sh.release()
		body, err := readBody(w, r, time.Now().Add(l.BodyTimeout), sh)
		if errors.Is(err, errBusy) {
			busy(w)
			return
		}
		if err != nil {
			writeBad(w, err)
			return
		}
		// What decoding the review takes, not its bytes alone, is what it
		// holds of the budget: a few bytes of "{}," decode into structs
		// of hundreds.
		if est := jsoncost.Estimate(body); est-int64(len(body)) > 2*l.MaxBytesInFlight {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("webhook: the review of %d bytes would take about %d "+
				"decoded, more than twice Limits.MaxBytesInFlight (%d): too many objects and elements for its size", len(body), est,
				l.MaxBytesInFlight))
			return
		} else if !sh.chargeTo(est) {
			busy(w)
			return
		}
		release, ok := s.inflight.acquire()
		if !ok {
			busy(w)
			return
		}
		defer release()
		h(w, r.WithContext(ctx), body)
	})
}

// checkPost refuses a request that is not a POST of JSON.
func checkPost(r *http.Request) error {
	if r.Method != http.MethodPost {
		return &badRequest{http.StatusMethodNotAllowed, "webhook: " + r.Method + " is not allowed; the API server POSTs a review"}
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return &badRequest{http.StatusUnsupportedMediaType,
			fmt.Sprintf("webhook: content type %q, want application/json", r.Header.Get("Content-Type"))}
	}
	return nil
}

// readBody reads r's body by the deadline, at most maxBody bytes, each
// chunk charged to sh (errBusy when it does not fit), then
// lifts the connection's read deadline: on HTTP/1.1 the server reads on
// after the body (to see the client go away), and a deadline passing then
// would end the handler's context before RequestTimeout, with another
// cause. A body that could not be read closes the connection after the
// answer, at once: the server does not wait for the rest of it.
func readBody(w http.ResponseWriter, r *http.Request, deadline time.Time, sh *share) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline) // fails only on a test recorder, which has no connection
	body, err := io.ReadAll(http.MaxBytesReader(w, charged{r.Body, sh}, maxBody))
	if err != nil {
		w.Header().Set("Connection", "close")
		_ = rc.SetReadDeadline(time.Now()) // what is left of the body is not read
	} else {
		_ = rc.SetReadDeadline(time.Time{})
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errBusy):
		return nil, err
	case errors.As(err, &tooBig):
		return nil, &badRequest{http.StatusRequestEntityTooLarge, fmt.Sprintf("webhook: the review has more than %d bytes", maxBody)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &badRequest{http.StatusRequestTimeout, "webhook: the review's body did not arrive within Limits.BodyTimeout"}
	case err != nil:
		return nil, &badRequest{http.StatusBadRequest, "webhook: reading the request: " + err.Error()}
	}
	return body, nil
}

// inflight counts the reviews being answered and the bytes of the bodies
// being read or answered, and refuses one that would take either over its
// bound.
type inflight struct {
	maxCount int
	maxBytes int64

	mu    sync.Mutex // guards count and bytes
	count int        // reviews being answered. Invariant: 0 <= count <= maxCount.
	bytes int64      // the shares' bytes. Invariant: 0 <= bytes <= maxBytes.
}

// acquire admits a review whose body has been read, if fewer than
// maxCount are being answered, and returns the function that gives its
// place back.
func (f *inflight) acquire() (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count >= f.maxCount {
		return nil, false
	}
	f.count++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.count--
			f.mu.Unlock()
		})
	}, true
}

// errBusy is a body whose bytes do not fit in MaxBytesInFlight beside the
// others'.
var errBusy = errors.New("webhook: the reviews in flight hold MaxBytesInFlight")

// share is one request's part of the byte budget: the bytes of its body
// that have arrived, at most the bound.
type share struct {
	f    *inflight
	held int64
}

// charge takes n more bytes for s; false when they do not fit beside the
// other shares. A share holds at most the bound, so a review alone fits.
func (s *share) charge(n int64) bool {
	n = min(n, s.f.maxBytes-s.held)
	if n <= 0 {
		return true
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.bytes+n > s.f.maxBytes {
		return false
	}
	s.f.bytes += n
	s.held += n
	return true
}

// chargeTo takes what s needs to hold total bytes; false when they do
// not fit beside the other shares.
func (s *share) chargeTo(total int64) bool { return s.charge(total - s.held) }

// release gives s's bytes back.
func (s *share) release() {
	s.f.mu.Lock()
	s.f.bytes -= s.held
	s.f.mu.Unlock()
	s.held = 0
}

// charged reads a body, charging each chunk to a share as it arrives.
type charged struct {
	r  io.ReadCloser
	sh *share
}

func (c charged) Close() error { return c.r.Close() }

func (c charged) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.sh.charge(int64(n)) {
		return 0, errBusy
	}
	return n, err
}
