package tracing_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/tracing"
)

func TestParse_readsW3CTraceparentsAndRefusesTheRest(t *testing.T) {
	const good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc, ok := tracing.Parse(good)
	if !ok || !sc.IsRemote() || !sc.IsSampled() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		sc.SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("Parse(%q) = %v, %v", good, sc, ok)
	}
	if got := tracing.Traceparent(sc); got != good {
		t.Errorf("Traceparent(Parse(x)) = %q, want %q", got, good)
	}
	for _, bad := range []string{"", "00", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
		"00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01", "00-zzf7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		" " + good, good + "\n", "\u3000" + good + "\u3000"} { // the format allows no whitespace: none is trimmed (it was, over the whole annotation, at every event)
		if _, ok := tracing.Parse(bad); ok {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
	if tracing.Traceparent(trace.SpanContext{}) != "" {
		t.Error("Traceparent of an invalid span context is not empty")
	}
	// An annotation is read at every event of a traced source: a long one
	// is refused by its length, before anything is allocated for it.
	long := strings.Repeat("-", 256<<10)
	if allocs := testing.AllocsPerRun(10, func() { tracing.Parse(long) }); allocs != 0 {
		t.Errorf("Parse of 256 KiB of dashes allocated %v times per call; want 0", allocs)
	}
}

func TestInject_writesTheSpanOfTheContextOnTheObject(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "reconcile")
	defer span.End()
	cm := &corev1.ConfigMap{}
	if !tracing.Inject(ctx, cm) {
		t.Fatal("Inject with a span in the context did nothing")
	}
	sc, ok := tracing.FromObject(cm)
	if !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("FromObject(Inject(x)) = %v, want the span's %v", sc, span.SpanContext())
	}
	if tracing.Inject(context.Background(), &corev1.ConfigMap{}) {
		t.Error("Inject without a span reported it wrote")
	}
	if _, ok := tracing.FromObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{tracing.TraceparentAnnotation: "garbage"}}}); ok {
		t.Error("FromObject accepted a malformed annotation")
	}
}

func TestWrites_keepsTheNewestUpToItsBound(t *testing.T) {
	ws := tracing.NewWrites(3)
	gr := schema.GroupResource{Resource: "configmaps"}
	name := object.ObjectName{Namespace: "ns", Name: "a"}
	for i := range 5 {
		ws.Record(gr, name, fmt.Sprint(i), tracing.Write{Controller: fmt.Sprint("c", i)})
	}
	ws.Record(gr, name, "", tracing.Write{Controller: "no version"})
	if ws.Len() != 3 {
		t.Errorf("Len = %d, want the bound 3", ws.Len())
	}
	for i := range 5 {
		w, ok := ws.Lookup(gr, name, fmt.Sprint(i))
		if ok != (i >= 2) || (ok && w.Controller != fmt.Sprint("c", i)) {
			t.Errorf("Lookup(version %d) = %+v, %v", i, w, ok)
		}
	}
}

// The transport gives a write made with a traced context a client span and
// records the version the server returned; reads and untraced writes pass
// through untouched.
func TestTransport_spansAndRecordsTracedWrites(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"made-x","namespace":"ns","resourceVersion":"42"}}`)
	}))
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ws := tracing.NewWrites(0)
	hc := &http.Client{Transport: tracing.Transport(tp.Tracer("t"), ws)(http.DefaultTransport)}
	do := func(ctx context.Context, method, path string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"resourceVersion":"42"`) {
			t.Errorf("the body reached the caller changed: %s", body)
		}
	}
	do(context.Background(), http.MethodPost, "/api/v1/namespaces/ns/configmaps")
	ctx, parent := tp.Tracer("t").Start(tracing.WithController(context.Background(), "mirror"), "reconcile")
	do(ctx, http.MethodGet, "/api/v1/namespaces/ns/configmaps/made-x")
	do(ctx, http.MethodPost, "/api/v1/namespaces/ns/configmaps")
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "create configmaps" || spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans = %d (first %q), want the traced create's and the reconcile's", len(spans), spans[0].Name)
	}
	w, ok := ws.Lookup(schema.GroupResource{Resource: "configmaps"}, object.ObjectName{Namespace: "ns", Name: "made-x"}, "42")
	if !ok || w.Controller != "mirror" || w.SpanContext.SpanID() != spans[0].SpanContext.SpanID() {
		t.Errorf("the write recorded = %+v, %v; want the create's span by controller mirror", w, ok)
	}
	if ws.Len() != 1 {
		t.Errorf("%d writes recorded, want 1 (the untraced create and the read are not)", ws.Len())
	}
}
