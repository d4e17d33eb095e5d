// Package apiwrite reads what an API write's request and response say:
// the resource and object of its path, the metadata of the object in its
// body (JSON or Kubernetes protobuf). The read-your-writes ledger and the
// tracing transport both read writes this way.
package apiwrite

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
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/object"
)

// Ref names one object of one resource.
type Ref struct {
	Resource schema.GroupResource
	Name     object.ObjectName
}

// Response reads the metadata of the object a write's response carries,
// putting the body back for the caller to read; ok is false when the body
// cannot be read or holds no object (a Status). A create's response names
// the object (generateName), so ref's name is taken from it when it has
// one.
func Response(resp *http.Response, ref *Ref) (meta metav1.ObjectMeta, ok bool) {
	meta, ok, _ = response(resp, ref)
	return meta, ok
}

// DeleteResponse is Response for a delete, which also reads (from the
// same read of the body) the UID of the object deleted: the object's,
// when the response carries it, else the Status's details' ("" when it
// names none).
func DeleteResponse(resp *http.Response, ref *Ref) (meta metav1.ObjectMeta, ok bool, uid types.UID) {
	meta, ok, body := response(resp, ref)
	if ok {
		return meta, true, meta.UID
	}
	return meta, false, statusUID(resp.Header.Get("Content-Type"), body)
}

// response reads the body once, puts it back for the caller and reads
// the object's metadata from it; body is nil when it could not be read.
func response(resp *http.Response, ref *Ref) (meta metav1.ObjectMeta, ok bool, body []byte) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return meta, false, nil
	}
	if meta, ok = ObjectMeta(resp.Header.Get("Content-Type"), body); ok && meta.Name != "" {
		ref.Name = object.ObjectName{Namespace: meta.Namespace, Name: meta.Name}
	}
	return meta, ok, body
}

// statusUID reads the UID in the details of a Status body, JSON or
// Kubernetes protobuf; "" when it is not a Status or names none.
func statusUID(contentType string, body []byte) types.UID {
	var st metav1.Status
	switch {
	case strings.HasPrefix(contentType, "application/json"):
		if json.Unmarshal(body, &st) != nil {
			return ""
		}
	case strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf") && bytes.HasPrefix(body, protoMagic):
		var u runtime.Unknown
		if u.Unmarshal(body[len(protoMagic):]) != nil || st.Unmarshal(u.Raw) != nil {
			return ""
		}
	}
	if st.Details == nil {
		return ""
	}
	return st.Details.UID
}

// ObjectMeta reads the metadata of the object in a response body, JSON or
// Kubernetes protobuf; ok is false for anything else, and for a Status.
func ObjectMeta(contentType string, body []byte) (meta metav1.ObjectMeta, ok bool) {
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

// ParsePath reads the resource and object of an API path:
// /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION/...;
// cluster-scoped paths have no namespaces/NS part.
func ParsePath(path string) (Ref, bool) {
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

// Verb names the write req makes: "create", "update", "patch", "apply" (a
// server-side apply, a patch of type application/apply-patch) or
// "delete"; "" for a read.
func Verb(req *http.Request) string {
	switch req.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodDelete:
		return "delete"
	case http.MethodPatch:
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			return "apply"
		}
		return "patch"
	}
	return ""
}
