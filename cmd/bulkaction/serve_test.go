package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

// otlpSpans is an OTLP/HTTP trace endpoint that passes on the names of the
// spans it receives.
func otlpSpans(t *testing.T) (url string, names <-chan string) {
	t.Helper()
	ch := make(chan string, 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			t.Errorf("OTLP request: %v", err)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					ch <- s.GetName()
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ch
}

// The spans a process ends last are exported before it exits: the
// shutdown flushes the batch still waiting for its export, whatever ended
// the process.
func TestRunExportsLastSpansOnShutdown(t *testing.T) {
	port := testkit.FreePort(t)
	startSystem(t, false, "HTTP_ADDR", fmt.Sprintf("127.0.0.1:%d", port))
	url, spans := otlpSpans(t)
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // no export before the shutdown's
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := run(ctx, "", "run", "--targets", "aggregator")
		done <- err
	}()
	testkit.WaitFor(t, "bulkaction ready", 30*time.Second, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("tracer provider %T while OTEL_EXPORTER_OTLP_ENDPOINT is set, want the SDK's", otel.GetTracerProvider())
	}
	_, span := otel.Tracer("test").Start(context.Background(), "last-span")
	span.End()

	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bulkaction run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("bulkaction run did not return after its context ended")
	}
	for {
		select {
		case name := <-spans:
			if name == "last-span" {
				return
			}
		default:
			t.Fatal("the last span was not exported by the time bulkaction returned")
		}
	}
}
