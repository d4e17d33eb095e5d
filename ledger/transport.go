package ledger

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
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
	ref, ok := parsePath(req.URL.Path)
	if !ok {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, err
	}
	meta, ok := objectMeta(resp.Header.Get("Content-Type"), body)
	switch {
	case !ok && req.Method == http.MethodDelete && ref.Name.Name != "": // a delete may answer with a Status
		t.l.Record(owner, ref, "", nil, true)
	case ok:
		if meta.Name != "" { // a create names the object in the response (generateName)
			ref.Name = object.ObjectName{Namespace: meta.Namespace, Name: meta.Name}
		}
		t.l.Record(owner, ref, meta.ResourceVersion, meta.Labels, req.Method == http.MethodDelete)
	}
	return resp, err
}

// objectMeta reads the metadata of the object in a response body, JSON or
// Kubernetes protobuf; ok is false for anything else, and for a Status.
func objectMeta(contentType string, body []byte) (meta metav1.ObjectMeta, ok bool) {
	switch {
	case strings.HasPrefix(contentType, "application/json"):
		var obj struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(body, &obj) != nil || obj.Kind == "Status" {
			return meta, false
		}
		return obj.Metadata, true
	case strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf"):
		return protobufMeta(body)
	}
	return meta, false
}

// protoMagic starts every Kubernetes protobuf message: a runtime.Unknown
// whose Raw is the object, whose field 1 is its ObjectMeta (in every API
// type).
var protoMagic = []byte{0x6b, 0x38, 0x73, 0x00}

func protobufMeta(body []byte) (meta metav1.ObjectMeta, ok bool) {
	if !bytes.HasPrefix(body, protoMagic) {
		return meta, false
	}
	var u runtime.Unknown
	if u.Unmarshal(body[len(protoMagic):]) != nil || u.Kind == "Status" {
		return meta, false
	}
	raw := u.Raw
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return meta, false
		}
		raw = raw[n:]
		if num == 1 && typ == protowire.BytesType {
			field, m := protowire.ConsumeBytes(raw)
			if m < 0 || meta.Unmarshal(field) != nil {
				return meta, false
			}
			return meta, true
		}
		m := protowire.ConsumeFieldValue(num, typ, raw)
		if m < 0 {
			return meta, false
		}
		raw = raw[m:]
	}
	return meta, false
}

// parsePath reads the resource and object of an API path:
// /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION/...;
// cluster-scoped paths have no namespaces/NS part.
func parsePath(path string) (Ref, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return Ref{}, false
	}
	var ns string
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || parts[0] == "" {
		return Ref{}, false
	}
	ref := Ref{Resource: schema.GroupResource{Group: group, Resource: parts[0]}, Name: object.ObjectName{Namespace: ns}}
	if len(parts) >= 2 {
		ref.Name.Name = parts[1]
	}
	return ref, true
}
