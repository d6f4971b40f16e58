package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otelVars are every variable SetupTracing or the exporter it builds reads.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_PROPAGATORS",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
}

// cleanOTel empties every OTEL_* variable for the test and restores the global provider and
// propagator afterwards.
func cleanOTel(t *testing.T) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != tp {
			otel.SetTracerProvider(tp)
		}
		otel.SetTextMapPropagator(prop)
	})
}

// recordingProvider installs the W3C propagator and returns a TracerProvider recording ended spans.
func recordingProvider(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	cleanOTel(t)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("github.com/bulkaction/bulkaction/internal/telemetry"), rec
}

// checkChild starts and ends a span under ctx and checks that its parent is the remote span parent.
func checkChild(t *testing.T, tracer trace.Tracer, rec *tracetest.SpanRecorder, ctx context.Context, parent trace.SpanContext) {
	t.Helper()
	_, child := tracer.Start(ctx, "ingest", trace.WithSpanKind(trace.SpanKindConsumer))
	child.End()
	var got sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "ingest" {
			got = s
		}
	}
	if got == nil {
		t.Fatal("child span not recorded")
	}
	if got.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("child trace id %s, want parent's %s", got.SpanContext().TraceID(), parent.TraceID())
	}
	if got.Parent().SpanID() != parent.SpanID() || !got.Parent().IsRemote() {
		t.Errorf("child parent = %s (remote %v), want remote %s", got.Parent().SpanID(), got.Parent().IsRemote(), parent.SpanID())
	}
}

func TestInjectExtractRoundTrip(t *testing.T) {
	tracer, rec := recordingProvider(t)
	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tracer.Start(baggage.ContextWithBaggage(context.Background(), bag), "submit",
		trace.WithSpanKind(trace.SpanKindProducer))
	h := nats.Header{}
	InjectHeader(ctx, h)
	parent.End()

	tp := h.Get("Traceparent")
	want := "00-" + parent.SpanContext().TraceID().String() + "-" + parent.SpanContext().SpanID().String() + "-01"
	if tp != want {
		t.Errorf("Traceparent = %q, want %q (header %v)", tp, want, h)
	}
	if h.Get("Baggage") != "tenant=acme" {
		t.Errorf("Baggage = %q", h.Get("Baggage"))
	}

	got := ExtractHeader(context.Background(), h)
	if v := baggage.FromContext(got).Member("tenant").Value(); v != "acme" {
		t.Errorf("extracted baggage tenant = %q, want acme", v)
	}
	checkChild(t, tracer, rec, got, parent.SpanContext())
}

func TestExtractHeaderLowerCaseKeys(t *testing.T) {
	tracer, rec := recordingProvider(t)
	_, parent := tracer.Start(context.Background(), "submit")
	parent.End()
	sc := parent.SpanContext()
	// As written by a producer in another language, which need not canonicalise keys.
	h := nats.Header{"traceparent": {"00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"}}
	checkChild(t, tracer, rec, ExtractHeader(context.Background(), h), sc)
}

func TestExtractHeaderWithoutContext(t *testing.T) {
	_, _ = recordingProvider(t)
	ctx := context.WithValue(context.Background(), struct{}{}, "kept")
	for _, h := range []nats.Header{nil, {}, {"Nats-Msg-Id": {"g1:j1"}}} {
		got := ExtractHeader(ctx, h)
		if trace.SpanContextFromContext(got).IsValid() {
			t.Errorf("header %v: extracted a span context from nothing", h)
		}
		if got.Value(struct{}{}) != "kept" {
			t.Errorf("header %v: ctx values lost", h)
		}
	}
	InjectHeader(context.Background(), nil) // must not panic
}

func TestTraceContextOverNATS(t *testing.T) {
	tracer, rec := recordingProvider(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("bulkaction.ready.email")
	if err != nil {
		t.Fatal(err)
	}

	ctx, parent := tracer.Start(context.Background(), "admit", trace.WithSpanKind(trace.SpanKindProducer))
	msg := nats.NewMsg("bulkaction.ready.email")
	msg.Header.Set("Nats-Msg-Id", "g1:j1:1")
	InjectHeader(ctx, msg.Header)
	msg.Data = []byte(`{"v":1}`)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	parent.End()

	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkChild(t, tracer, rec, ExtractHeader(context.Background(), got.Header), parent.SpanContext())
}

func TestSetupTracingOff(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string // besides an OTLP endpoint that counts requests, when withEndpoint
		// withEndpoint points OTEL_EXPORTER_OTLP_ENDPOINT at a server that must receive nothing.
		withEndpoint bool
	}{
		{name: "no OTEL variables"},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, withEndpoint: true},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true"}, withEndpoint: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanOTel(t)
			var mu sync.Mutex
			requests := 0
			if tt.withEndpoint {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					mu.Lock()
					requests++
					mu.Unlock()
				}))
				t.Cleanup(srv.Close)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			shutdown, err := SetupTracing(context.Background(), "fetcher")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
				t.Errorf("global provider is %T, want noop.TracerProvider", otel.GetTracerProvider())
			}
			_, span := otel.Tracer("t").Start(context.Background(), "x")
			if span.IsRecording() {
				t.Error("span records while tracing is off")
			}
			span.End()
			if err := shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if requests != 0 {
				t.Errorf("exporter endpoint received %d requests while tracing is off", requests)
			}
			fields := strings.Join(otel.GetTextMapPropagator().Fields(), ",")
			if !strings.Contains(fields, "traceparent") || !strings.Contains(fields, "baggage") {
				t.Errorf("propagator fields = %s, want traceparent and baggage", fields)
			}
		})
	}
}

// otlpReceiver is an OTLP/HTTP trace endpoint collecting the export requests it receives.
type otlpReceiver struct {
	srv  *httptest.Server
	reqs chan *coltracepb.ExportTraceServiceRequest
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{reqs: make(chan *coltracepb.ExportTraceServiceRequest, 16)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			t.Errorf("OTLP request to %s", req.URL.Path)
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("read OTLP body: %v", err)
		}
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			t.Errorf("decode OTLP body: %v", err)
		}
		r.reqs <- &m
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func TestSetupTracingExportsOTLP(t *testing.T) {
	tests := []struct {
		name, envService, wantService string
		endpointVar                   string
	}{
		{"default service name", "", "fetcher", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_SERVICE_NAME wins", "fetcher-eu", "fetcher-eu", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"traces endpoint", "", "fetcher", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanOTel(t)
			recv := newOTLPReceiver(t)
			url := recv.srv.URL
			if tt.endpointVar == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" {
				url += "/v1/traces" // the signal-specific endpoint is used as is
			}
			t.Setenv(tt.endpointVar, url)
			t.Setenv("OTEL_SERVICE_NAME", tt.envService)

			shutdown, err := SetupTracing(context.Background(), "fetcher")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
				t.Fatalf("global provider is %T, want the SDK provider", otel.GetTracerProvider())
			}
			_, span := otel.Tracer("t").Start(context.Background(), "ingest")
			if !span.IsRecording() {
				t.Error("span not recording while tracing is on")
			}
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}

			var req *coltracepb.ExportTraceServiceRequest
			select {
			case req = <-recv.reqs:
			default:
				t.Fatal("no OTLP export received by the time shutdown returned")
			}
			rs := req.GetResourceSpans()
			if len(rs) != 1 {
				t.Fatalf("resource spans = %d", len(rs))
			}
			service := ""
			for _, kv := range rs[0].GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			if service != tt.wantService {
				t.Errorf("service.name = %q, want %q", service, tt.wantService)
			}
			ss := rs[0].GetScopeSpans()
			if len(ss) != 1 || len(ss[0].GetSpans()) != 1 || ss[0].GetSpans()[0].GetName() != "ingest" {
				t.Errorf("exported spans = %v, want one named ingest", ss)
			}
		})
	}
}

func TestSetupTracingBadConfig(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "carrier-pigeon"}},
		{"unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "smtp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanOTel(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			shutdown, err := SetupTracing(context.Background(), "fetcher")
			if err == nil {
				_ = shutdown(context.Background())
				t.Fatal("SetupTracing accepted a bad configuration")
			}
		})
	}
}

// A span that would record nothing is not started (Untraced): the caller
// gets its context and its parent's span, with the same span context the
// no-op span would have carried; a tracer that records, or a recording
// parent, still starts one.
func TestUntraced(t *testing.T) {
	cleanOTel(t)
	ctx := context.Background()
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	remote := trace.ContextWithRemoteSpanContext(ctx, parent)
	noopTracer := noop.NewTracerProvider().Tracer("t")
	checkUntraced(t, "no-op", remote, parent, noopTracer)
	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(ctx) })
	recording := sdk.Tracer("t")
	if _, ok := Untraced(remote, recording); ok {
		t.Error("an SDK tracer: untraced")
	}
	if _, span := StartMessageSpan(remote, recording, "x", trace.SpanKindConsumer, "subject"); !span.IsRecording() ||
		span.SpanContext().TraceID() != parent.TraceID() || span.SpanContext().SpanID() == parent.SpanID() {
		t.Errorf("an SDK tracer: span %v recording %v", span.SpanContext(), span.IsRecording())
	}
	// a recording parent: its children are started, whatever the tracer
	rctx, rspan := recording.Start(ctx, "parent")
	defer rspan.End()
	if _, ok := Untraced(rctx, noopTracer); ok {
		t.Error("a recording parent: untraced")
	}

	// The global provider's tracers, in a process of their own: whether a
	// provider was ever set is the process's.
	if os.Getenv("UNTRACED_GLOBAL") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUntraced$", "-test.v")
		cmd.Env = append(os.Environ(), "UNTRACED_GLOBAL=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "global tracer checked") {
			t.Fatalf("the global provider's tracers: %v\n%s", err, out)
		}
		return
	}
	if otel.GetTracerProvider() != unsetProvider {
		t.Fatal("a provider was set before the test")
	}
	global := otel.GetTracerProvider().Tracer("t")
	checkUntraced(t, "global, no provider set", remote, parent, global)
	otel.SetTracerProvider(sdk) // tracing on: the global tracer follows
	if _, ok := Untraced(remote, global); ok {
		t.Error("global tracer with an SDK provider: untraced")
	}
	if _, span := StartMessageSpan(remote, global, "x", trace.SpanKindConsumer, "subject"); !span.IsRecording() {
		t.Errorf("global tracer with an SDK provider: span %v not recording", span.SpanContext())
	}
	t.Log("global tracer checked")
}

// checkUntraced checks that tracer is Untraced under remote (whose span
// context is parent), that the span it would start is the parent's span
// context, not recording, and that StartMessageSpan hands back remote and
// that span context.
func checkUntraced(t *testing.T, name string, remote context.Context, parent trace.SpanContext, tr trace.Tracer) {
	t.Helper()
	if sp, ok := Untraced(remote, tr); !ok || !sp.SpanContext().Equal(parent) {
		t.Errorf("%s tracer: traced (%v), or not the parent's span", name, !ok)
	}
	if _, sp := tr.Start(remote, "x"); sp.IsRecording() || !sp.SpanContext().Equal(parent) {
		t.Errorf("%s tracer: its span records (%v) or has another context %v", name, sp.IsRecording(), sp.SpanContext())
	}
	got, span := StartMessageSpan(remote, tr, "x", trace.SpanKindConsumer, "subject")
	if got != remote || !span.SpanContext().Equal(parent) || span.IsRecording() {
		t.Errorf("%s tracer: StartMessageSpan gave a new context or span %v", name, span.SpanContext())
	}
}
