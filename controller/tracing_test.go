package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
	"github.com/ctrlkit/ctrlkit/tracing"
)

func linkAttr(l sdktrace.Link, key string) string {
	for _, kv := range l.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A reconcile's span links every event merged into it, up to MaxLinks with
// a count beyond; an event from an object's sampled traceparent makes it
// join that trace, an unsampled one is only linked; a retry and a requeue
// are links of the next reconcile, to the span of the reconcile that asked
// for it; an event of the controller's own write counts as self-triggered;
// the key's last trace id is in KeyStats.
func TestController_tracesEachReconcileWithTheEventsMergedIntoIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		reg := prometheus.NewRegistry()
		writes := tracing.NewWrites(0)
		release, gate := make(chan struct{}), make(chan struct{})
		calls := map[string]int{}
		c := newController(t, func(ctx context.Context, key string) (Result, error) {
			calls[key]++
			if tracing.ControllerFrom(ctx) != "traced" {
				t.Errorf("the reconcile's context names controller %q, want traced", tracing.ControllerFrom(ctx))
			}
			switch {
			case key == "ns/merged" && calls[key] == 1:
				<-release // the events below merge while it runs
			case key == "ns/gate":
				<-gate // the batch below is added while it runs
			case key == "ns/fails" && calls[key] <= 3:
				return Result{}, errors.New("not yet")
			}
			return Result{}, nil
		}, Options[string]{Name: "traced", Tracer: tp.Tracer("test"), Writes: writes, Telemetry: telemetry.Telemetry{Registerer: reg}})
		stop := runInBubble(t, c)

		cms := schema.GroupResource{Resource: "configmaps"}
		cause := func(obj, rv string) Cause {
			n, _ := object.ParseObjectName(obj)
			return Cause{Resource: cms, Object: n, ResourceVersion: rv, Handler: "For"}
		}
		c.AddBatchCaused([]string{"ns/merged"}, []Reason{{Event: "add", Source: "cms"}}, []Cause{cause("ns/merged", "1")}, 0)
		synctest.Wait() // reconciling, blocked
		for i := range 10 {
			c.AddBatchCaused([]string{"ns/merged"}, []Reason{{Event: "update", Source: "cms"}},
				[]Cause{cause("ns/merged", fmt.Sprint(2+i))}, 0)
		}
		close(release)
		synctest.Wait()

		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
			TraceFlags: trace.FlagsSampled, Remote: true})
		withParent := cause("ns/child", "7")
		withParent.Traceparent = parent
		c.AddBatchCaused([]string{"ns/child"}, []Reason{{Event: "add", Source: "cms"}}, []Cause{withParent}, 0)
		synctest.Wait()
		// An unsampled traceparent is linked, not joined: as the parent it
		// would have the provider's ParentBased sampler drop the span.
		unsampled := cause("ns/unsampled", "8")
		unsampled.Traceparent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, Remote: true})
		c.AddBatchCaused([]string{"ns/unsampled"}, []Reason{{Event: "add", Source: "cms"}}, []Cause{unsampled}, 0)
		synctest.Wait()

		many := make([]string, MaxLinks+5)
		whys := make([]Reason, len(many))
		causes := make([]Cause, len(many))
		for i := range many {
			many[i], whys[i], causes[i] = "ns/many", Reason{Event: "update", Source: "cms"}, cause("ns/many", fmt.Sprint(i))
		}
		c.Add("ns/gate") // the only worker is busy while the batch is added: it cannot take ns/many halfway
		synctest.Wait()
		c.AddBatchCaused(many, whys, causes, 0)
		close(gate)
		synctest.Wait()

		self := cause("ns/self", "9")
		writes.Record(cms, self.Object, "9", tracing.Write{Controller: "traced", SpanContext: trace.NewSpanContext(
			trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})})
		c.AddBatchCaused([]string{"ns/self"}, []Reason{{Event: "update", Source: "cms"}}, []Cause{self}, 0)
		c.Add("ns/fails")
		time.Sleep(time.Minute) // the retries' backoff, in the bubble's time
		synctest.Wait()
		stop()

		byKey := map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byKey[spanAttr(s, "ctrlkit.key")] = append(byKey[spanAttr(s, "ctrlkit.key")], s)
		}
		merged := byKey["ns/merged"]
		if len(merged) != 2 || len(merged[0].Links) != 1 || len(merged[1].Links) != 10 {
			t.Fatalf("ns/merged: %d spans, want 2 (one link, then ten merged updates)", len(merged))
		}
		for i, l := range merged[1].Links {
			if linkAttr(l, "ctrlkit.event") != "update" || linkAttr(l, "ctrlkit.informer") != "cms" ||
				linkAttr(l, "k8s.resource_version") != fmt.Sprint(2+i) || linkAttr(l, "ctrlkit.handler") != "For" ||
				linkAttr(l, "k8s.object") != "ns/merged" {
				t.Errorf("link %d of the merged reconcile = %v", i, l.Attributes)
			}
		}
		if child := byKey["ns/child"]; len(child) != 1 || child[0].SpanContext.TraceID() != parent.TraceID() ||
			child[0].Parent.SpanID() != parent.SpanID() {
			t.Errorf("the reconcile of an object with a traceparent did not join its trace: %+v", child)
		}
		if u := byKey["ns/unsampled"]; len(u) != 1 || u[0].SpanContext.TraceID() == (trace.TraceID{7}) || u[0].Parent.IsValid() ||
			len(u[0].Links) != 1 || u[0].Links[0].SpanContext.TraceID() != (trace.TraceID{7}) {
			t.Errorf("the reconcile of an object with an unsampled traceparent: %+v, want one span of its own trace linking it", u)
		}
		if m := byKey["ns/many"]; len(m) != 1 || len(m[0].Links) != MaxLinks || spanAttr(m[0], "ctrlkit.links.dropped") != "5" {
			var got []string
			for _, s := range m {
				got = append(got, fmt.Sprintf("%d links, %s dropped", len(s.Links), spanAttr(s, "ctrlkit.links.dropped")))
			}
			t.Errorf("ns/many: spans %v, want one span with %d links and 5 dropped", got, MaxLinks)
		}
		if s := byKey["ns/self"]; len(s) != 1 || linkAttr(s[0].Links[0], "ctrlkit.self_triggered") != "true" ||
			s[0].Links[0].SpanContext.TraceID() != (trace.TraceID{9}) {
			t.Errorf("ns/self: the link to the controller's own write is missing or not marked")
		}
		if got := testutil.ToFloat64(c.metrics.self); got != 1 {
			t.Errorf("ctrlkit_controller_self_triggered_total = %v, want 1", got)
		}
		fails := byKey["ns/fails"]
		if len(fails) != 4 {
			t.Fatalf("ns/fails: %d spans, want 4", len(fails))
		}
		if fails[0].Status.Code.String() != "Error" || spanAttr(fails[3], "ctrlkit.result") != "success" ||
			len(fails[1].Links) != 1 || linkAttr(fails[1].Links[0], "ctrlkit.event") != "retry after error" {
			t.Errorf("ns/fails: the failed reconcile's status or the retry's link is wrong: %+v", fails[1].Links)
		}
		for i := 1; i < len(fails); i++ {
			if len(fails[i].Links) != 1 || fails[i].Links[0].SpanContext.SpanID() != fails[i-1].SpanContext.SpanID() {
				t.Errorf("ns/fails: retry %d does not link the span of the reconcile that failed before it", i)
			}
		}
		if got := c.KeyStats("ns/fails").TraceID; got != fails[3].SpanContext.TraceID().String() {
			t.Errorf("KeyStats.TraceID = %q, want the last reconcile's %s", got, fails[3].SpanContext.TraceID())
		}
		if !strings.Contains(spanAttr(fails[0], "ctrlkit.controller"), "traced") {
			t.Error("the span does not name its controller")
		}
		if !hasExemplar(t, reg, "controller_runtime_reconcile_time_seconds", fails[3].SpanContext.TraceID().String()) {
			t.Error("the reconcile-time histogram has no exemplar pointing at the last reconcile's trace")
		}
	})
}

// Without a tracer, AddBatchCaused is AddBatchBecause: no link is kept.
func TestController_withoutATracerNoLinkIsKept(t *testing.T) {
	c := newController(t, func(context.Context, string) (Result, error) { return Result{}, nil }, Options[string]{})
	c.AddBatchCaused([]string{"ns/a"}, []Reason{{Event: "add"}}, []Cause{{Object: object.ObjectName{Namespace: "ns", Name: "a"}}}, 0)
	if c.Tracing() || len(c.track.links) != 0 {
		t.Errorf("a controller without a tracer kept %d links", len(c.track.links))
	}
	if ks := c.KeyStats("ns/a"); ks.Adds != 1 || ks.TraceID != "" {
		t.Errorf("KeyStats = %+v, want one add and no trace", ks)
	}
}

// hasExemplar reports whether a bucket of the histogram called name has an
// exemplar whose trace_id is traceID.
func hasExemplar(t *testing.T, reg *prometheus.Registry, name, traceID string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" && l.GetValue() == traceID {
						return true
					}
				}
			}
		}
	}
	return false
}

// With TraceSampling, a reconcile has a span only if an event merged into
// it was drawn (a zero Cause is one not drawn), a requeue is drawn like an
// event, and about that share of the keys' reconciles are traced.
func TestController_traceSamplingTracesOnlyTheReconcilesOfDrawnEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		c := newController(t, func(context.Context, string) (Result, error) { return Result{}, nil },
			Options[string]{Name: "sampled", Tracer: tp.Tracer("test"), TraceSampling: 0.5})
		stop := runInBubble(t, c)
		drawn := Cause{Object: object.ObjectName{Namespace: "ns", Name: "drawn"}, ResourceVersion: "1", Handler: "For"}
		c.AddBatchCaused([]string{"ns/drawn", "ns/undrawn"}, []Reason{{Event: "add"}, {Event: "add"}}, []Cause{drawn, {}}, 0)
		synctest.Wait()
		const keys = 400
		drawnAdds := 0
		for i := range keys {
			if c.Drawn() {
				drawnAdds++
			}
			c.Add(fmt.Sprintf("ns/k%d", i)) // a plain add draws for itself
		}
		synctest.Wait()
		stop()
		byKey := map[string]int{}
		for _, s := range exp.GetSpans() {
			byKey[spanAttr(s, "ctrlkit.key")]++
		}
		if byKey["ns/drawn"] != 1 || byKey["ns/undrawn"] != 0 {
			t.Errorf("spans of the drawn and the undrawn event's reconciles: %d and %d, want 1 and 0", byKey["ns/drawn"], byKey["ns/undrawn"])
		}
		traced := len(exp.GetSpans()) - byKey["ns/drawn"]
		// Binomial(400, 0.5): outside 120..280 with probability below 1e-15.
		if traced < 120 || traced > 280 || drawnAdds < 120 || drawnAdds > 280 {
			t.Errorf("%d of %d reconciles traced, %d of %d draws true; want about half", traced, keys, drawnAdds, keys)
		}
		if c.KeyStats("ns/undrawn").TraceID != "" {
			t.Error("an untraced reconcile has a trace id in KeyStats")
		}
	})
}
