// Package tracing answers "why did this reconcile run?" with OpenTelemetry
// traces. A controller given a tracer (controller.Options.Tracer; the
// manager's Options.TracerProvider gives every controller one) starts a
// span per reconcile whose links name every event merged into it: the
// informer, the object and its resource version, the event, the handler
// that queued it (For, Owns, Watches), a requeue or a retry. Writes made
// with the reconcile's context through the manager's connections (its
// typed clients, its clientset, the apply helpers) get a span each, and
// this package remembers the resource version each returned (Writes), so
// that when the watch event carrying that version comes back and queues a
// reconcile, the link says which write, by which controller, caused it: a
// controller that keeps triggering itself shows in its spans and in
// ctrlkit_controller_self_triggered_total.
//
// KEP-5915's annotation tracing.k8s.io/traceparent is read: a reconcile
// queued by an event of an object carrying it joins that trace. Writing it
// on the objects a controller creates or changes is the caller's choice
// (Inject), since it makes every write a change.
//
// Without a tracer nothing here runs: no allocation and no lookup per
// event.
//
// # Spans and attributes
//
// A reconcile's span is named "reconcile <controller>" and carries:
//
//	ctrlkit.controller     the controller's name
//	ctrlkit.key            the key reconciled, as it prints
//	ctrlkit.links          the events merged into this reconcile (its links, dropped ones included)
//	ctrlkit.links.dropped  the links not kept (past the span's limit)
//	ctrlkit.result         success, error or requeue_after (an error also sets the span's status)
//	ctrlkit.requeue_after  the Result's RequeueAfter, when set
//
// Each of its links, one per event merged into it, carries:
//
//	ctrlkit.event          what happened (controller.Reason.Event): add, update, delete, initial list, resync, retry after error, requeue after, ...
//	ctrlkit.informer       the informer that saw the event, as /readyz and the debug page name it
//	ctrlkit.handler        the source that queued the key: For, Owns or Watches
//	k8s.object             the object of the event, namespace/name
//	k8s.resource_version   its resource version in the event
//	ctrlkit.writer         the controller whose write made that version, when a traced write did
//	ctrlkit.self_triggered true when that writer is this reconcile's own controller
//
// A link points to the span of the write that caused its event when there
// is one, else to the object's traceparent (see TraceparentAnnotation),
// else to nothing. A write's span (Transport) is named "<verb>
// <resource>" ("apply configmaps", "update secrets") and carries
// k8s.resource, k8s.object and, once answered, k8s.resource_version.
package tracing

import (
	"context"
	"encoding/hex"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.opentelemetry.io/otel/trace"
)

// TraceparentAnnotation is the annotation of KEP-5915 that carries a W3C
// traceparent ("00-<trace id>-<span id>-<flags>") on an object.
const TraceparentAnnotation = "tracing.k8s.io/traceparent"

// FromObject returns the span context of obj's traceparent annotation, if
// it carries a valid one (a remote span context).
func FromObject(obj metav1.Object) (trace.SpanContext, bool) {
	tp, ok := obj.GetAnnotations()[TraceparentAnnotation]
	if !ok {
		return trace.SpanContext{}, false
	}
	return Parse(tp)
}

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = len("00-") + 32 + len("-") + 16 + len("-") + 2

// Parse reads a W3C traceparent of version 00; ok is false for anything
// else (whitespace around it included, which the format does not allow),
// and for an all-zero trace or span id.
func Parse(tp string) (sc trace.SpanContext, ok bool) {
	if len(tp) != traceparentLen {
		return sc, false // before anything else: an annotation may be long, and is read at every event
	}
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return sc, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !decodeLower(tid[:], parts[1]) || !decodeLower(sid[:], parts[2]) || !decodeLower(flags[:], parts[3]) {
		return sc, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// decodeLower decodes lower-case hex s into dst (the W3C format allows no
// upper case).
func decodeLower(dst []byte, s string) bool {
	if strings.ToLower(s) != s {
		return false
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// Traceparent formats sc as a W3C traceparent ("" for an invalid sc).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Inject writes the traceparent of the span in ctx (a reconcile's, inside
// a traced controller) on obj, before obj is created or updated, so that
// the controllers that reconcile obj join this trace. It reports whether
// it did: false when ctx carries no valid span. Note the cost: the
// annotation differs at every reconcile, so each write changes the object
// (and wakes its watchers) even when nothing else did.
func Inject(ctx context.Context, obj metav1.Object) bool {
	tp := Traceparent(trace.SpanContextFromContext(ctx))
	if tp == "" {
		return false
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[TraceparentAnnotation] = tp
	obj.SetAnnotations(a)
	return true
}

type controllerKey struct{}

// WithController returns ctx carrying the name of the controller whose
// reconcile it is, for the spans and records of the writes made with it.
func WithController(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, controllerKey{}, name)
}

// ControllerFrom returns the controller name WithController put in ctx.
func ControllerFrom(ctx context.Context) string {
	name, _ := ctx.Value(controllerKey{}).(string)
	return name
}
