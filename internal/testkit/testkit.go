package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

// DefaultTimeout is how long [WaitFor] waits when given 0.
const DefaultTimeout = 30 * time.Second

// StopTimeout is how long the stop function of [Start] waits for Run to
// return.
const StopTimeout = 10 * time.Second

// Main is a TestMain for packages without servers: it makes the W3C trace
// context the global propagator ([UseTraceContext]) and runs the tests with
// goleak.VerifyTestMain, which fails the binary if goroutines are left
// running once every test is done.
func Main(m *testing.M) {
	UseTraceContext()
	goleak.VerifyTestMain(m)
}

// UseTraceContext makes the W3C trace context the global propagator, so
// that trace context travels in message headers as in production.
func UseTraceContext() {
	otel.SetTextMapPropagator(propagation.TraceContext{})
}

// CheckLeaks fails t if goroutines started after the call are still running
// once t and its cleanups are done. Call it first in a test, so that its
// check runs after every other cleanup.
func CheckLeaks(t testing.TB) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// RecordSpans returns a tracer provider that keeps every span it ends in the
// returned recorder. The provider is shut down when the test ends.
func RecordSpans(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// WaitFor polls cond every 5 ms until it holds, failing t with what after
// timeout (0 means [DefaultTimeout]).
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Service is anything with a blocking Run, such as the services of the
// pipeline.
type Service interface {
	Run(ctx context.Context) error
}

// Start runs s in a goroutine and returns a function that cancels it and
// waits for Run to return, failing t if Run does not return nil within
// [StopTimeout]. The function is also called when the test ends; calling it
// again does nothing.
func Start(t testing.TB, s Service) (stop func()) {
	t.Helper()
	return StartWithin(t, s, StopTimeout)
}

// StartWithin is [Start] with within in place of [StopTimeout]: the stop
// function fails t if Run has not returned nil within that long of the
// cancel. within must be positive (0 would fail any Run that does not
// return the instant it is cancelled).
func StartWithin(t testing.TB, s Service, within time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v after cancel, want nil", err)
				}
			case <-time.After(within):
				t.Errorf("Run did not return within %s of cancel", within)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
