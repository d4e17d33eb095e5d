package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/tracing"
)

// spansOf returns the ended spans named name whose attribute key is value.
func spansOf(exp *tracetest.InMemoryExporter, name, key, value string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name != name {
			continue
		}
		for _, kv := range s.Attributes {
			if string(kv.Key) == key && kv.Value.Emit() == value {
				out = append(out, s)
			}
		}
	}
	return out
}

// tracedManager returns a manager, not started, on the test's API server,
// tracing to an in-memory exporter with Options.TraceSampling sampling,
// with its provider, a client and a fresh namespace.
func tracedManager(t *testing.T, sampling float64) (*manager.Manager, *sdktrace.TracerProvider, *tracetest.InMemoryExporter,
	kubernetes.Interface, string) {
	t.Helper()
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := quiet(t)
	opts.TracerProvider, opts.TraceSampling = tp, sampling
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, tp, exp, apiserver.Client(t, srv.Config()), ns
}

func linkAttr(l sdktrace.Link, key string) string {
	for _, kv := range l.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// Causal tracing on the real API server: an object applied with a
// traceparent annotation, a controller A that creates a child (writing
// the traceparent on it) and marks its own object, a controller B that
// reconciles the child: the spans form one trace; A's write of its own
// object comes back as a self-triggered reconcile (link and metric); ten
// updates merged into one reconcile give one span with ten links.
func TestManager_tracesWhyEachReconcileRan(t *testing.T) {
	m, tp, exp, kube, ns := tracedManager(t, 0)
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	cmClient, secretClient := manager.Client[*corev1.ConfigMap](m), manager.Client[*corev1.Secret](m)

	hold, release := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	a, err := manager.NewController(m, "a", controller.ReconcileFunc[object.ObjectName](
		func(ctx context.Context, n object.ObjectName) (controller.Result, error) {
			cm, ok := cms.Reader().Get(n)
			if !ok {
				return controller.Result{}, nil
			}
			if cm.Labels["mode"] == "merge" {
				holdOnce.Do(func() { close(hold); <-release })
				return controller.Result{}, nil
			}
			child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "child-of-" + n.Name, Namespace: n.Namespace,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}}
			tracing.Inject(ctx, child)
			if _, err := secretClient.Create(ctx, child, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return controller.Result{}, err
			}
			if cm.Labels["seen"] == "" {
				seen := cm.DeepCopy()
				seen.Labels["seen"] = "yes"
				if _, err := cmClient.Update(ctx, seen, metav1.UpdateOptions{}); err != nil {
					return controller.Result{}, err
				}
			}
			return controller.Result{}, nil
		}), manager.ControllerOptions{}, manager.For(cms))
	if err != nil {
		t.Fatal(err)
	}
	var bDone sync.Map
	if _, err := manager.NewController(m, "b", controller.ReconcileFunc[object.ObjectName](
		func(_ context.Context, n object.ObjectName) (controller.Result, error) {
			bDone.Store(n, true)
			return controller.Result{}, nil
		}), manager.ControllerOptions{}, manager.For(secrets)); err != nil {
		t.Fatal(err)
	}
	base := start(t, m)
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseHeld) // a failure below still lets the held reconcile end
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })

	// kubectl apply, traced: the object carries the traceparent.
	rootCtx, root := tp.Tracer("kubectl").Start(context.Background(), "kubectl apply")
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent", Namespace: ns, Labels: map[string]string{"mode": "parent"}}}
	tracing.Inject(rootCtx, parent)
	root.End()
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), parent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	childName := object.ObjectName{Namespace: ns, Name: "child-of-parent"}
	eventually(t, 30*time.Second, "B reconciles the child", func() bool { _, ok := bDone.Load(childName); return ok })
	selfSeries := `ctrlkit_controller_self_triggered_total{controller="a"} 1`
	eventually(t, 30*time.Second, "A's write of its own object counted as self-triggered", func() bool {
		_, metrics := get(t, base+"/metrics")
		return strings.Contains(metrics, selfSeries)
	})

	trace := root.SpanContext().TraceID()
	aSpans := spansOf(exp, "reconcile a", "ctrlkit.key", ns+"/parent")
	if len(aSpans) < 2 {
		t.Fatalf("%d reconcile spans of A for the parent, want at least 2 (the create, then its own write)", len(aSpans))
	}
	first := aSpans[0]
	if first.SpanContext.TraceID() != trace || first.Parent.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("A's reconcile is not in the trace of the object's traceparent")
	}
	if len(first.Links) != 1 || linkAttr(first.Links[0], "ctrlkit.event") != "add" || linkAttr(first.Links[0], "ctrlkit.handler") != "For" ||
		linkAttr(first.Links[0], "k8s.object") != ns+"/parent" || linkAttr(first.Links[0], "k8s.resource_version") == "" ||
		!strings.HasPrefix(linkAttr(first.Links[0], "ctrlkit.informer"), "configmaps/v1") {
		t.Errorf("A's first reconcile links %+v, want the add of the parent by For", first.Links)
	}
	creates := spansOf(exp, "create secrets", "k8s.object", childName.String())
	if len(creates) == 0 || creates[0].Parent.SpanID() != first.SpanContext.SpanID() {
		t.Errorf("no span of A's create of the child under its reconcile")
	}
	bSpans := spansOf(exp, "reconcile b", "ctrlkit.key", childName.String())
	if len(bSpans) == 0 || bSpans[0].SpanContext.TraceID() != trace {
		t.Errorf("B's reconcile of the child is not in the same trace (kubectl → A → child → B)")
	}
	var self bool
	for _, s := range aSpans[1:] {
		for _, l := range s.Links {
			if linkAttr(l, "ctrlkit.self_triggered") == "true" && linkAttr(l, "ctrlkit.writer") == "a" && l.SpanContext.IsValid() {
				self = true
			}
		}
	}
	if !self {
		t.Error("no reconcile of A links A's own write of the parent as self-triggered")
	}

	// Ten updates merged into one reconcile: one span, ten links.
	merge := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "merge", Namespace: ns, Labels: map[string]string{"mode": "merge"}}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), merge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-hold
	mergeKey := object.ObjectName{Namespace: ns, Name: "merge"}
	for i := range 10 {
		merge.Data = map[string]string{"i": string(rune('0' + i))}
		if merge, err = kube.CoreV1().ConfigMaps(ns).Update(t.Context(), merge, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The next update waits for this one to reach the cache: the
		// delta FIFO compacts consecutive updates of a key it has not
		// yet handed on, so a loaded informer would see fewer than ten.
		rv := merge.ResourceVersion
		eventually(t, 30*time.Second, "update "+rv+" in the cache", func() bool {
			cm, ok := cms.Reader().Get(mergeKey)
			return ok && cm.ResourceVersion == rv
		})
	}
	eventually(t, 30*time.Second, "ten updates queued behind the running reconcile", func() bool {
		return a.KeyStats(mergeKey).Adds == 10
	})
	releaseHeld()
	eventually(t, 30*time.Second, "the merged reconcile traced", func() bool {
		return len(spansOf(exp, "reconcile a", "ctrlkit.key", mergeKey.String())) == 2
	})
	merged := spansOf(exp, "reconcile a", "ctrlkit.key", mergeKey.String())[1]
	if len(merged.Links) != 10 {
		t.Fatalf("the merged reconcile has %d links, want 10", len(merged.Links))
	}
	for _, l := range merged.Links {
		if linkAttr(l, "ctrlkit.event") != "update" {
			t.Errorf("a merged link is a %q, want update", linkAttr(l, "ctrlkit.event"))
		}
	}
	if got := a.KeyStats(mergeKey).TraceID; got != merged.SpanContext.TraceID().String() {
		t.Errorf("KeyStats.TraceID = %q, want the merged reconcile's trace", got)
	}
}

// A controller's own delete comes back linked to it: the API server
// answers a delete with a Status (no resource version), and the delete's
// watch event carries the version the deletion made, so the event is
// matched to the traced delete by the deleted object's UID; the reconcile
// it queues links the delete's span as self-triggered.
func TestManager_aControllersOwnDeleteIsLinkedAsSelfTriggered(t *testing.T) {
	m, _, exp, kube, ns := tracedManager(t, 0)
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	secretClient := manager.Client[*corev1.Secret](m)
	if _, err := manager.NewController(m, "pruner", controller.ReconcileFunc[object.ObjectName](
		func(ctx context.Context, n object.ObjectName) (controller.Result, error) {
			if _, ok := secrets.Reader().Get(n); !ok {
				return controller.Result{}, nil
			}
			err := secretClient.Delete(ctx, n, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				err = nil
			}
			return controller.Result{}, err
		}), manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets)); err != nil {
		t.Fatal(err)
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	key := ns + "/a"
	eventually(t, 30*time.Second, "the delete's span", func() bool { return len(spansOf(exp, "delete secrets", "k8s.object", key)) > 0 })
	del := spansOf(exp, "delete secrets", "k8s.object", key)[0]
	eventually(t, 30*time.Second, "a reconcile linking the delete", func() bool {
		for _, s := range spansOf(exp, "reconcile pruner", "ctrlkit.key", key) {
			for _, l := range s.Links {
				if linkAttr(l, "ctrlkit.event") == "delete" && l.SpanContext.SpanID() == del.SpanContext.SpanID() &&
					linkAttr(l, "ctrlkit.self_triggered") == "true" && linkAttr(l, "ctrlkit.writer") == "pruner" {
					return true
				}
			}
		}
		return false
	})
}

// With Options.TraceSampling drawing (almost) no event, the reconciles of
// plain objects get no span, and an object carrying a sampled traceparent
// still gets its reconcile traced in its trace: a source draws per event
// and links the undrawn only when their object's trace is sampled.
func TestManager_traceSamplingTracesOnlyDrawnEventsAndSampledTraceparents(t *testing.T) {
	m, tp, exp, kube, ns := tracedManager(t, 1e-15)
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	var seen sync.Map
	if _, err := manager.NewController(m, "sampled", controller.ReconcileFunc[object.ObjectName](
		func(_ context.Context, n object.ObjectName) (controller.Result, error) {
			seen.Store(n.Name, true)
			return controller.Result{}, nil
		}), manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	const plain = 20
	for i := range plain {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "plain-" + strings.Repeat("x", i+1)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rootCtx, root := tp.Tracer("kubectl").Start(context.Background(), "kubectl apply")
	traced := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "traced", Namespace: ns}}
	tracing.Inject(rootCtx, traced)
	root.End()
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), traced, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every ConfigMap reconciled", func() bool {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n == plain+1
	})
	var spans []tracetest.SpanStub
	eventually(t, 10*time.Second, "the traced ConfigMap's reconcile span ended", func() bool { // it ends after the reconcile returns
		spans = spansOf(exp, "reconcile sampled", "ctrlkit.controller", "sampled")
		return len(spans) > 0
	})
	if len(spans) != 1 || spans[0].SpanContext.TraceID() != root.SpanContext().TraceID() {
		var keys []string
		for _, s := range spans {
			for _, kv := range s.Attributes {
				if kv.Key == "ctrlkit.key" {
					keys = append(keys, kv.Value.Emit())
				}
			}
		}
		t.Fatalf("reconcile spans of %v; want only the traced ConfigMap's, in its trace", keys)
	}
}

// With LinkTraceparents, an object's traceparent annotation (anyone who
// may write the object writes it) neither picks the trace a reconcile
// joins nor makes it traced: the reconcile starts its own trace, linked
// to the annotation's span, and only if its event was drawn.
func TestManager_linkTraceparentsTakesAnnotationsAsClaims(t *testing.T) {
	const chosen = "41414141414141414141414141414141"
	const annotation = "00-" + chosen + "-4242424242424242-01"
	for _, tc := range []struct {
		name     string
		sampling float64 // the manager's TraceSampling
		spans    int     // reconcile spans wanted of n objects
	}{{"every event drawn", 0, 5}, {"almost none drawn", 1e-15, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, exp, kube, ns := tracedManager(t, tc.sampling)
			cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
			var seen sync.Map
			if _, err := manager.NewController(m, "linked", controller.ReconcileFunc[object.ObjectName](
				func(_ context.Context, n object.ObjectName) (controller.Result, error) {
					seen.Store(n.Name, true)
					return controller.Result{}, nil
				}), manager.ControllerOptions{Options: controller.Options[object.ObjectName]{LinkTraceparents: true}},
				manager.For(cms)); err != nil {
				t.Fatal(err)
			}
			start(t, m)
			const n = 5
			for i := range n {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "claimed-" + strings.Repeat("x", i+1),
					Annotations: map[string]string{tracing.TraceparentAnnotation: annotation}}}
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 30*time.Second, "every ConfigMap reconciled", func() bool {
				k := 0
				seen.Range(func(any, any) bool { k++; return true })
				return k == n
			})
			var spans []tracetest.SpanStub
			if tc.spans > 0 {
				eventually(t, 10*time.Second, "every reconcile's span ended", func() bool { // each ends after its reconcile returns
					spans = spansOf(exp, "reconcile linked", "ctrlkit.controller", "linked")
					return len(spans) >= tc.spans
				})
			}
			spans = spansOf(exp, "reconcile linked", "ctrlkit.controller", "linked")
			if len(spans) != tc.spans {
				t.Fatalf("%d reconcile spans; want %d", len(spans), tc.spans)
			}
			for _, s := range spans {
				linked := false
				for _, l := range s.Links {
					linked = linked || l.SpanContext.TraceID().String() == chosen
				}
				if s.SpanContext.TraceID().String() == chosen || s.Parent.IsValid() || !linked {
					t.Errorf("a reconcile span in trace %s, parent %v, links %v; want its own trace, no parent, a link to the annotation's span",
						s.SpanContext.TraceID(), s.Parent, s.Links)
				}
			}
		})
	}
}
