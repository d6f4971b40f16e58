package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"reflect"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is the service.name [SetupTracing] uses when both OTEL_SERVICE_NAME and its
// serviceName argument are empty.
const DefaultServiceName = "bulkaction"

// SetupTracing installs the global OpenTelemetry TracerProvider and TextMapPropagator and returns
// a function that flushes and stops the provider (call it on shutdown, with a deadline).
//
// The propagator is W3C TraceContext plus Baggage, unless OTEL_PROPAGATORS names others. It is
// installed in every case, so trace context keeps flowing through a target that does not export.
//
// Tracing is off — a no-op provider, nothing dialled, shutdown does nothing — unless one of
// OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER is set;
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true turn it off regardless. When on, the exporter
// is configured by the standard variables (OTEL_TRACES_EXPORTER otlp|console, default otlp;
// OTEL_EXPORTER_OTLP_PROTOCOL grpc|http/protobuf, default http/protobuf; endpoints, headers,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*). The resource's service.name is OTEL_SERVICE_NAME, else
// serviceName, else [DefaultServiceName]; OTEL_RESOURCE_ATTRIBUTES adds attributes.
//
// An invalid variable value is an error.
func SetupTracing(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(autoprop.NewTextMapPropagator())
	off := func() (func(context.Context) error, error) {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	}
	if !tracingRequested() {
		return off()
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: trace exporter from OTEL_* variables: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return off()
	}
	if serviceName == "" {
		serviceName = DefaultServiceName
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: trace resource from OTEL_SERVICE_NAME/OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// tracingRequested reports whether the environment asks for spans to be exported.
func tracingRequested() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp != "" {
		return exp != "none"
	}
	return strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// InjectHeader writes the trace context of ctx (traceparent, tracestate, baggage) into the NATS
// header h with the global propagator. Keys are written in canonical MIME form ("Traceparent"),
// as [ExtractHeader] expects. A nil h is left alone: create it with nats.Header{} or nats.NewMsg.
func InjectHeader(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}

// ExtractHeader returns ctx carrying the remote trace context (and baggage) found in the NATS
// header h by the global propagator; ctx itself when h holds none. Keys are matched regardless of
// case, so a producer that wrote "traceparent" in lower case is understood too.
func ExtractHeader(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	carrier := propagation.HeaderCarrier(h)
	for k := range h {
		if textproto.CanonicalMIMEHeaderKey(k) != k {
			carrier = canonicalCopy(h)
			break
		}
	}
	return otel.GetTextMapPropagator().Extract(ctx, carrier)
}

// canonicalCopy returns h with every key in canonical MIME form, values of equal keys merged.
func canonicalCopy(h nats.Header) propagation.HeaderCarrier {
	c := make(http.Header, len(h))
	for k, vs := range h {
		for _, v := range vs {
			c.Add(k, v)
		}
	}
	return propagation.HeaderCarrier(c)
}

// Span attribute keys every service puts on a job's spans, so one job's
// spans can be searched by the same keys whichever service made them.
const (
	// AttrTenant is the tenant of the job's group.
	AttrTenant = attribute.Key("bulkaction.tenant")
	// AttrGroupID is the job's group id.
	AttrGroupID = attribute.Key("bulkaction.group_id")
	// AttrJobID is the job's id within its group.
	AttrJobID = attribute.Key("bulkaction.job_id")
	// AttrJobType is the job's type.
	AttrJobType = attribute.Key("bulkaction.job_type")
	// AttrAttempt is the job's attempt (1 first).
	AttrAttempt = attribute.Key("bulkaction.attempt")
)

// StartMessageSpan starts the span of handling or sending one NATS message:
// a span named name of the given kind (producer or consumer) with the
// messaging attributes of subject and attrs. Attributes are set only on a
// recording span, so a process without a tracer allocates none. It is the
// one place the services open message spans.
func StartMessageSpan(ctx context.Context, tracer trace.Tracer, name string, kind trace.SpanKind, subject string,
	attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if span, ok := Untraced(ctx, tracer); ok {
		return ctx, span
	}
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(kind))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
		)
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// unsetProvider is the global TracerProvider before any is set: its tracers
// (of type globalTracer) make non-recording spans until one is, then
// follow the first one set.
var (
	unsetProvider = otel.GetTracerProvider()
	globalTracer  = reflect.TypeOf(unsetProvider.Tracer(""))
)

// Untraced reports whether a span tracer would start under ctx records
// nothing and carries its parent's span context, and returns ctx's span
// when so: ctx's span is not recording, and tracer is a no-op one (as the
// provider SetupTracing installs with tracing off gives) or a tracer of the
// global provider while none has been set. The context and span a caller
// would get from such a span are then ctx and that span, which a caller
// may take instead of starting one, for nothing: a service starts a span
// or two per job, each several allocations even when it records nothing.
// Ending that span, or setting its status, does nothing either: it does
// not record.
func Untraced(ctx context.Context, tracer trace.Tracer) (trace.Span, bool) {
	if _, ok := tracer.(noop.Tracer); !ok &&
		(reflect.TypeOf(tracer) != globalTracer || otel.GetTracerProvider() != unsetProvider) {
		return nil, false
	}
	// one lookup: a context.WithoutCancel boxes itself on each
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		return nil, false
	}
	return span, true
}
