package tracing_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/tracing"
)

// A reconcile writing a child object puts its trace on it, so that the
// controller of the child joins the same trace (KEP-5915).
func ExampleInject() {
	// Inside a traced reconcile, ctx carries the reconcile's span; here,
	// a fixed one.
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	}))
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "ns"}}
	tracing.Inject(ctx, child)
	fmt.Println(child.Annotations[tracing.TraceparentAnnotation])

	sc, ok := tracing.FromObject(child)
	fmt.Println(ok, sc.TraceID(), sc.IsRemote())
	// Output:
	// 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// true 0af7651916cd43dd8448eb211c80319c true
}
