package tracing

import (
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/internal/apiwrite"
	"github.com/ctrlkit/ctrlkit/object"
)

// Write is a write made inside a traced reconcile: its span and the
// controller that made it.
type Write struct {
	SpanContext trace.SpanContext
	Controller  string
}

// writeKey names one version of one object.
type writeKey struct {
	resource        schema.GroupResource
	name            object.ObjectName
	resourceVersion string
}

// Writes remembers the most recent writes made inside traced reconciles,
// by the object and resource version each returned, so that the event
// carrying that version can be linked to its write. It holds at most its
// bound (the oldest go first). Safe for concurrent use.
type Writes struct {
	mu    sync.Mutex
	byKey map[writeKey]Write
	order []writeKey // a ring of the keys, oldest at next
	next  int
}

// DefaultWrites is the bound NewWrites(0) takes.
const DefaultWrites = 4096

// NewWrites returns an empty Writes that keeps at most bound writes
// (DefaultWrites for 0 or less).
func NewWrites(bound int) *Writes {
	if bound <= 0 {
		bound = DefaultWrites
	}
	return &Writes{byKey: make(map[writeKey]Write, bound), order: make([]writeKey, 0, bound)}
}

// Record remembers w as the write that made version resourceVersion of
// the object called name of resource.
func (ws *Writes) Record(resource schema.GroupResource, name object.ObjectName, resourceVersion string, w Write) {
	if resourceVersion == "" {
		return
	}
	k := writeKey{resource, name, resourceVersion}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := ws.byKey[k]; ok {
		ws.byKey[k] = w
		return
	}
	if len(ws.order) < cap(ws.order) {
		ws.order = append(ws.order, k)
	} else {
		delete(ws.byKey, ws.order[ws.next])
		ws.order[ws.next] = k
		ws.next = (ws.next + 1) % len(ws.order)
	}
	ws.byKey[k] = w
}

// deletedVersion stands for the end of the object with uid among the
// versions of writes: a delete's response carries no resource version
// (a Status, or the object as it was), and its watch event carries the
// version the deletion made, so a delete is found by the UID the event's
// object has. It cannot be a resource version (those hold no NUL).
func deletedVersion(uid types.UID) string { return "\x00deleted " + string(uid) }

// RecordDelete remembers w as the write that deleted the object with uid
// called name of resource.
func (ws *Writes) RecordDelete(resource schema.GroupResource, name object.ObjectName, uid types.UID, w Write) {
	if uid != "" {
		ws.Record(resource, name, deletedVersion(uid), w)
	}
}

// LookupDelete returns the write that deleted the object with uid called
// name of resource, if it is remembered.
func (ws *Writes) LookupDelete(resource schema.GroupResource, name object.ObjectName, uid types.UID) (Write, bool) {
	if uid == "" {
		return Write{}, false
	}
	return ws.Lookup(resource, name, deletedVersion(uid))
}

// Lookup returns the write that made version resourceVersion of the
// object called name of resource, if it is remembered.
func (ws *Writes) Lookup(resource schema.GroupResource, name object.ObjectName, resourceVersion string) (Write, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.byKey[writeKey{resource, name, resourceVersion}]
	return w, ok
}

// Len returns how many writes are remembered.
func (ws *Writes) Len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byKey)
}

// Transport returns a wrapper of a RoundTripper (for rest.Config.Wrap)
// that gives each create, update, patch and delete made with a context
// carrying a valid span (a traced reconcile's) a client span of its own,
// child of that one, with the resource, the object, the status code and
// the resource version the server returned (a delete: the UID of the
// object deleted); and records the write in writes (a delete by that
// UID, RecordDelete). Reads, and writes made outside a traced reconcile, pass through
// untouched.
func Transport(tracer trace.Tracer, writes *Writes) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &transport{tracer: tracer, writes: writes, next: rt}
	}
}

type transport struct {
	tracer trace.Tracer
	writes *Writes
	next   http.RoundTripper
}

// WrappedRoundTripper lets client-go's helpers reach the transport
// underneath.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := apiwrite.Verb(req)
	if verb == "" || !trace.SpanContextFromContext(req.Context()).IsValid() {
		return t.next.RoundTrip(req)
	}
	ref, ok := apiwrite.ParsePath(req.URL.Path)
	if !ok {
		return t.next.RoundTrip(req)
	}
	ctx, span := t.tracer.Start(req.Context(), verb+" "+ref.Resource.String(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("k8s.resource", ref.Resource.String()),
			attribute.String("k8s.object", ref.Name.String())))
	defer span.End()
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 300 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
		return resp, nil
	}
	w := Write{SpanContext: span.SpanContext(), Controller: ControllerFrom(req.Context())}
	var meta metav1.ObjectMeta
	if verb == "delete" {
		var uid types.UID
		if meta, ok, uid = apiwrite.DeleteResponse(resp, &ref); uid != "" {
			span.SetAttributes(attribute.String("k8s.uid", string(uid)))
			t.writes.RecordDelete(ref.Resource, ref.Name, uid, w)
		}
	} else {
		meta, ok = apiwrite.Response(resp, &ref)
	}
	if !ok {
		return resp, nil
	}
	span.SetAttributes(attribute.String("k8s.object", ref.Name.String()))
	span.SetAttributes(attribute.String("k8s.resource_version", meta.ResourceVersion))
	t.writes.Record(ref.Resource, ref.Name, meta.ResourceVersion, w)
	return resp, nil
}
