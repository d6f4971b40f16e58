package handoff

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// parentContext returns ctx carrying the remote span context of a stored
// W3C traceparent; ctx itself when tp is empty or invalid.
func parentContext(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Traceparent returns the W3C traceparent of the span context in ctx, or ""
// when ctx carries no valid span context. It is the form a job's trace is
// stored in ([redisq.Job.Trace]).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

func endAll(spans []trace.Span) {
	for _, s := range spans {
		if s != nil {
			s.End()
		}
	}
}
