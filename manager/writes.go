package manager

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/internal/apiwrite"
	"github.com/ctrlkit/ctrlkit/tracing"
)

// writeCounter counts the writes sent with a reconcile's context through
// the manager's connections, by controller and verb: a reconcile that
// changes nothing shows as no write (an apply that apply.Apply skips, a
// CreateOrUpdate that finds the object as wanted, send none), where client-
// go's rest_client_requests_total counts every request of the process.
type writeCounter struct {
	next   http.RoundTripper
	writes *prometheus.CounterVec
}

func newWriteCounter(reg prometheus.Registerer) (func(http.RoundTripper) http.RoundTripper, error) {
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctrlkit_controller_writes_total",
		Help: "Writes sent with a controller's reconcile context through the manager's connections, whatever their outcome, by controller and verb: create, update, patch, apply (a server-side apply) or delete.",
	}, []string{"controller", "verb"})
	if err := reg.Register(writes); err != nil {
		return nil, err
	}
	return func(rt http.RoundTripper) http.RoundTripper { return &writeCounter{next: rt, writes: writes} }, nil
}

// WrappedRoundTripper lets client-go's helpers (closing idle connections)
// reach the transport underneath.
func (t *writeCounter) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if verb := apiwrite.Verb(req); verb != "" {
		if name := tracing.ControllerFrom(req.Context()); name != "" {
			t.writes.WithLabelValues(name, verb).Inc()
		}
	}
	return t.next.RoundTrip(req)
}
