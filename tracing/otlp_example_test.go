package tracing_test

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/manager"
)

// A manager whose reconciles and writes are traced to an OpenTelemetry
// collector over OTLP/gRPC: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT
// (default localhost:4317) and the other OTEL_EXPORTER_OTLP_* variables.
// 1% of the events are drawn for tracing by the manager (TraceSampling),
// the provider records what it is given (ParentBased(AlwaysSample)): the
// cheap way to sample. (Not run as a test: it needs a cluster and a
// collector.)
func Example_otlp() {
	run := func(ctx context.Context, cfg *rest.Config) error {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
		defer func() { _ = tp.Shutdown(context.Background()) }() // flushes the spans still batched
		m, err := manager.New(cfg, manager.Options{TracerProvider: tp, TraceSampling: 0.01})
		if err != nil {
			return err
		}
		// ... informers and controllers, as without tracing ...
		return m.Run(ctx)
	}
	_ = run
}
