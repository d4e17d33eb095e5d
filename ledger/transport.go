package ledger

import (
	"net/http"

	"github.com/ctrlkit/ctrlkit/internal/apiwrite"
)

// Transport returns a RoundTripper that records, in l, every successful
// create, update, patch and delete whose request context carries an owner
// (WithOwner): the object from the URL and the JSON response, the resource
// version from the response. Set it as a rest.Config's WrapTransport. Other
// requests pass through untouched.
func (l *Ledger) Transport(rt http.RoundTripper) http.RoundTripper {
	return &transport{l: l, next: rt}
}

type transport struct {
	l    *Ledger
	next http.RoundTripper
}

// WrappedRoundTripper lets client-go's helpers (closing idle connections)
// reach the transport underneath.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	owner, ok := OwnerFrom(req.Context())
	if !ok || req.Method == http.MethodGet {
		return t.next.RoundTrip(req)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode >= 300 {
		return resp, err
	}
	ref, ok := apiwrite.ParsePath(req.URL.Path)
	if !ok {
		return resp, err
	}
	meta, ok := apiwrite.Response(resp, &ref)
	switch {
	case !ok && req.Method == http.MethodDelete && ref.Name.Name != "": // a delete may answer with a Status
		t.l.Record(owner, ref, "", nil, true)
	case ok:
		t.l.Record(owner, ref, meta.ResourceVersion, meta.Labels, req.Method == http.MethodDelete)
	}
	return resp, err
}
