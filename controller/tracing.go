package controller

import (
	"context"
	"fmt"
	"math/rand/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/tracing"
)

// Cause is one event that queued a key, as the span of the reconcile that
// handles it links it (Options.Tracer). A manager's sources give one per
// key they add (AddBatchCaused).
type Cause struct {
	// Resource and Object name the object the event was about, and
	// ResourceVersion its version in the event.
	Resource        schema.GroupResource
	Object          object.ObjectName
	ResourceVersion string
	// Handler is what turned the event into the key: "For", "Owns",
	// "Watches".
	Handler string
	// Traceparent is the span of the object's traceparent annotation
	// (KEP-5915), if it carries one: the reconcile joins that trace
	// (linked only, with Options.LinkTraceparents).
	Traceparent trace.SpanContext
	// DeletedUID is, for a delete event, the UID of the object deleted:
	// the event is linked to the traced delete of that object
	// (tracing.Writes.RecordDelete) when no write made its version.
	DeletedUID types.UID
}

// MaxLinks bounds the links of one reconcile's span; the events beyond
// are counted in its attribute ctrlkit.links.dropped.
const MaxLinks = 32

// maxTraceIDs bounds how many keys' last trace ids KeyStats can tell.
const maxTraceIDs = 4096

// links are what the links of one key's next reconcile are made of.
type links struct {
	// first is the first link, held inline: most keys have one event
	// between two reconciles; more are the rest. n counts both.
	first   pendingLink
	more    []pendingLink
	n       int
	dropped int
	parent  trace.SpanContext
}

// pendingLink is one link, made when the reconcile starts: by then the
// write that caused its event, if one did, has been recorded (a write's
// event can arrive before the writer has read the write's response).
type pendingLink struct {
	event, source string
	cause         Cause
	hasCause      bool
	prev          trace.SpanContext // a retry's or requeue's: the span of the reconcile that asked for it
}

// Attribute keys of reconcile spans and their links.
const (
	attrController    = attribute.Key("ctrlkit.controller")
	attrKey           = attribute.Key("ctrlkit.key")
	attrEvent         = attribute.Key("ctrlkit.event")
	attrInformer      = attribute.Key("ctrlkit.informer")
	attrHandler       = attribute.Key("ctrlkit.handler")
	attrObject        = attribute.Key("k8s.object")
	attrVersion       = attribute.Key("k8s.resource_version")
	attrWriter        = attribute.Key("ctrlkit.writer")
	attrSelfTriggered = attribute.Key("ctrlkit.self_triggered")
	attrLinks         = attribute.Key("ctrlkit.links")
	attrDropped       = attribute.Key("ctrlkit.links.dropped")
	attrResult        = attribute.Key("ctrlkit.result")
	attrRequeueAfter  = attribute.Key("ctrlkit.requeue_after")
)

// Tracing reports whether the controller traces its reconciles
// (Options.Tracer set): a source builds Causes only then.
func (c *Controller[K]) Tracing() bool { return c.opts.Tracer != nil }

// Drawn reports whether an event is drawn for tracing (see
// Options.TraceSampling): a random draw, true for every event without
// sampling. A source asks once per event and gives the events not drawn a
// zero Cause, unless their object carries a sampled traceparent and the
// controller joins traceparents (JoinsTraceparents).
func (c *Controller[K]) Drawn() bool { return c.track.draw() }

// JoinsTraceparents reports whether a reconcile joins the trace of its
// object's traceparent annotation, and is traced when that is sampled
// (not Options.LinkTraceparents).
func (c *Controller[K]) JoinsTraceparents() bool { return !c.opts.LinkTraceparents }

// draw is Drawn.
func (t *tracker[K]) draw() bool { return t.drawBelow == 0 || rand.Uint64() < t.drawBelow }

// AddBatchCaused is AddBatchBecause with a Cause for each key, linked from
// the span of the key's next reconcile. The source has drawn its events
// (Drawn): a zero Cause (no Object) is one not drawn and links nothing,
// and no causes at all (nil) is a batch none of whose events was drawn.
// Without a tracer the causes are ignored. It panics if the slices differ
// in length (causes may be nil).
func (c *Controller[K]) AddBatchCaused(keys []K, reasons []Reason, causes []Cause, priority int) {
	if (len(causes) != 0 && len(causes) != len(keys)) || len(reasons) != len(keys) {
		panic(fmt.Sprintf("controller: AddBatchCaused with %d keys, %d reasons and %d causes", len(keys), len(reasons), len(causes)))
	}
	if c.opts.Tracer == nil || len(keys) == 0 {
		c.AddBatchBecause(keys, reasons, priority)
		return
	}
	c.addNoted(keys, reasons, causes, false, priority)
}

// drawPlain draws keys added with no reason (Add, AddWithPriority,
// AddBatch) for tracing, with sampling on: a drawn key's next reconcile is
// traced, a span with no link. Without sampling every reconcile is
// offered to the tracer anyway, and nothing is done.
func (t *tracker[K]) drawPlain(keys ...K) {
	if t.drawBelow == 0 {
		return
	}
	for _, k := range keys {
		if !t.draw() {
			continue
		}
		t.mu.Lock()
		if t.links == nil {
			t.links = map[K]*links{}
		}
		if t.links[k] == nil {
			t.links[k] = t.newLinksLocked()
		}
		t.mu.Unlock()
	}
}

// linkLocked adds the link of r and cause (nil: a requeue or retry) to
// key's next reconcile and returns it (nil: dropped past MaxLinks).
// Called with t.mu held.
func (t *tracker[K]) linkLocked(key K, r Reason, cause *Cause) *pendingLink {
	if t.links == nil {
		t.links = map[K]*links{}
	}
	l := t.links[key]
	if l == nil {
		l = t.newLinksLocked()
		t.links[key] = l
	}
	// Only a sampled traceparent is joined: with an unsampled one as its
	// parent, a ParentBased sampler (the SDK's default) would drop the
	// span, so whoever writes a watched object could keep its reconciles
	// (and the writes they cause) out of every trace. It is linked.
	if cause != nil && cause.Traceparent.IsSampled() && !l.parent.IsValid() && !t.linkOnly {
		l.parent = cause.Traceparent
	}
	if l.n >= MaxLinks {
		l.dropped++
		return nil
	}
	p := pendingLink{event: r.Event, source: r.Source}
	if cause != nil {
		p.cause, p.hasCause = *cause, true
	}
	l.n++
	if l.n == 1 {
		l.first = p
		return &l.first
	}
	l.more = append(l.more, p)
	return &l.more[len(l.more)-1]
}

// write returns the traced write that made p's event's version of the
// object, if writes remembers it.
func (p *pendingLink) write(writes *tracing.Writes) (tracing.Write, bool) {
	if !p.hasCause || writes == nil {
		return tracing.Write{}, false
	}
	if w, ok := writes.Lookup(p.cause.Resource, p.cause.Object, p.cause.ResourceVersion); ok {
		return w, true
	}
	return writes.LookupDelete(p.cause.Resource, p.cause.Object, p.cause.DeletedUID)
}

// link makes the link of p: to the span of w, the traced write that made
// its event's version of the object (ok), else to its traceparent; a
// retry's or requeue's to the reconcile that asked for it.
func (p *pendingLink) link(controller string, w tracing.Write, ok bool) trace.Link {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attrEvent.String(p.event))
	if p.source != "" {
		attrs = append(attrs, attrInformer.String(p.source))
	}
	sc := p.prev
	if c := &p.cause; p.hasCause {
		attrs = append(attrs, attrHandler.String(c.Handler), attrObject.String(c.Object.String()),
			attrVersion.String(c.ResourceVersion))
		sc = c.Traceparent
	}
	if ok {
		sc = w.SpanContext
		attrs = append(attrs, attrWriter.String(w.Controller), attrSelfTriggered.Bool(w.Controller == controller))
	}
	return trace.Link{SpanContext: sc, Attributes: attrs}
}

// takeLinks returns and forgets the links of key's next reconcile (nil:
// none); give them back with freeLinks.
func (t *tracker[K]) takeLinks(key K) *links {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.links[key]
	delete(t.links, key)
	return l
}

// newLinksLocked returns an empty links, reused if one is free. Called
// with t.mu held.
func (t *tracker[K]) newLinksLocked() *links {
	if n := len(t.free); n > 0 {
		l := t.free[n-1]
		t.free = t.free[:n-1]
		return l
	}
	return &links{}
}

// maxFree bounds the links a tracker keeps for reuse.
const maxFree = 1024

// freeLinks gives l back for reuse.
func (t *tracker[K]) freeLinks(l *links) {
	clear(l.more) // hold no cause's strings
	l.first, l.more, l.n, l.dropped, l.parent = pendingLink{}, l.more[:0], 0, 0, trace.SpanContext{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) < maxFree {
		t.free = append(t.free, l)
	}
}

// traced records the trace id of key's latest reconcile, for KeyStats.
func (t *tracker[K]) traced(key K, id trace.TraceID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.traceIDs == nil {
		t.traceIDs = map[K]trace.TraceID{}
	}
	if _, ok := t.traceIDs[key]; !ok && len(t.traceIDs) >= maxTraceIDs {
		for k := range t.traceIDs { // forget one, any: a bound, not a cache policy
			delete(t.traceIDs, k)
			break
		}
	}
	t.traceIDs[key] = id
}

// The start options of reconcile spans: a new root, or the child of an
// object's traceparent.
var (
	rootSpan  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot()}
	childSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// startSpan starts the span of key's reconcile and returns ctx carrying
// it; with sampling (Options.TraceSampling), none when no event merged
// into the reconcile was drawn (span nil). A span the sampler records gets a link per
// event merged into the reconcile and the key's attributes; one it drops
// costs no more than its start (its links are not made; the sampler sees
// none, as it sees no attribute). Either way a link to the controller's
// own write counts the reconcile as self-triggered.
func (c *Controller[K]) startSpan(ctx context.Context, key K) (context.Context, trace.Span) {
	l := c.track.takeLinks(key)
	if l == nil && c.track.drawBelow != 0 {
		return ctx, nil // no event of this reconcile was drawn: no span
	}
	opts := rootSpan
	if l != nil && l.parent.IsValid() {
		ctx, opts = trace.ContextWithRemoteSpanContext(ctx, l.parent), childSpan
	}
	ctx, span := c.opts.Tracer.Start(ctx, c.spanName, opts...)
	recording, self, n := span.IsRecording(), false, 0
	if l != nil {
		for i := range l.n {
			p := &l.first
			if i > 0 {
				p = &l.more[i-1]
			}
			w, ok := p.write(c.opts.Writes)
			self = self || (ok && w.Controller == c.opts.Name)
			if recording {
				span.AddLink(p.link(c.opts.Name, w, ok))
			}
		}
		n = l.n + l.dropped
		if recording {
			span.SetAttributes(attrDropped.Int(l.dropped))
		}
		c.track.freeLinks(l)
	}
	if recording {
		span.SetAttributes(attrController.String(c.opts.Name), attrKey.String(fmt.Sprint(key)), attrLinks.Int(n))
	}
	if self {
		c.metrics.selfTriggered()
	}
	if sc := span.SpanContext(); sc.IsValid() && recording {
		c.track.traced(key, sc.TraceID())
	}
	return ctx, span // the worker's context names the controller (tracing.WithController)
}

// endSpan records how the reconcile of span ended, and ends it.
func endSpan(span trace.Span, res Result, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrResult.String(resultError))
	case res.RequeueAfter > 0:
		span.SetAttributes(attrResult.String(resultRequeueAfter), attrRequeueAfter.String(res.RequeueAfter.String()))
	default:
		span.SetAttributes(attrResult.String(resultSuccess))
	}
	span.End()
}

// exemplar returns the trace id of span for an exemplar, if it is sampled.
func exemplar(span trace.Span) string {
	if span == nil {
		return ""
	}
	if sc := span.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}
