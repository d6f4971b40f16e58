package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	js    jetstream.JetStream
	names contracts.Names
	spans *tracetest.SpanRecorder
}

func setup(t *testing.T) (*client.Client, *testBundle) {
	t.Helper()
	_, _, js := testenv.NATS(t)
	b := &testBundle{js: js, spans: tracetest.NewSpanRecorder()}
	if err := natsutil.EnsureStreams(context.Background(), js, b.names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return client.New(js, client.Options{TracerProvider: tp}), b
}

func (b *testBundle) submitCount(t *testing.T) uint64 {
	t.Helper()
	n, err := natsutil.StreamMsgs(context.Background(), b.js, b.names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stored returns every message of the SUBMIT stream in order.
func (b *testBundle) stored(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := b.js.Stream(ctx, b.names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	state := st.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	for seq := state.FirstSeq; state.Msgs > 0 && seq <= state.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

func makeJobs(n int) []client.Job {
	jobs := make([]client.Job, n)
	prios := []contracts.Priority{"", contracts.PriorityHigh, contracts.PriorityLow}
	for i := range jobs {
		jobs[i] = client.Job{
			ID:           fmt.Sprintf("job-%04d", i),
			Type:         "email",
			Payload:      json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
			Priority:     prios[i%len(prios)],
			BasePriority: int64(i % 5),
		}
	}
	return jobs
}

func TestSubmitThousandJobs(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	const gid = "promo-1"
	jobs := makeJobs(1000)
	if err := c.Submit(ctx, gid, jobs...); err != nil {
		t.Fatal(err)
	}
	if n := b.submitCount(t); n != 1000 {
		t.Fatalf("SUBMIT holds %d messages, want 1000", n)
	}

	spans := b.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	span := spans[0]
	if span.Name() != "bulkaction.submit" || span.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("span %q kind %v, want bulkaction.submit producer", span.Name(), span.SpanKind())
	}
	if span.InstrumentationScope().Name != "github.com/bulkaction/bulkaction/pkg/client" {
		t.Fatalf("tracer %q", span.InstrumentationScope().Name)
	}
	attrs := attribute.NewSet(span.Attributes()...)
	if v, _ := attrs.Value(client.AttrGroupID); v.AsString() != gid {
		t.Errorf("group id attribute %q", v.AsString())
	}
	if v, _ := attrs.Value(client.AttrJobCount); v.AsInt64() != 1000 {
		t.Errorf("job count attribute %d", v.AsInt64())
	}

	seen := map[string]bool{}
	for _, m := range b.stored(t) {
		sub, err := contracts.DecodeSubmission(m.Subject, m.Data, contracts.Limits{})
		if err != nil {
			t.Fatalf("stored message does not decode: %v: %s", err, m.Data)
		}
		if sub.Kind != contracts.KindJob || sub.GroupID != gid || m.Subject != b.names.Submit(gid) {
			t.Fatalf("message %s: %+v", m.Subject, sub)
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), contracts.SubmitMsgID(gid, sub.JobID); got != want {
			t.Fatalf("Nats-Msg-Id %q, want %q", got, want)
		}
		var i int
		if _, err := fmt.Sscanf(sub.JobID, "job-%d", &i); err != nil || seen[sub.JobID] {
			t.Fatalf("unexpected or repeated job id %q", sub.JobID)
		}
		seen[sub.JobID] = true
		j := jobs[i]
		if sub.Type != j.Type || string(sub.Payload) != string(j.Payload) || sub.Priority != j.Priority || sub.BasePriority != j.BasePriority {
			t.Fatalf("job %d stored as %+v, submitted %+v", i, sub, j)
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(m.Header)))
		if !sc.IsValid() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
			t.Fatalf("job %d carries trace context %v, want the submit span %v", i, sc, span.SpanContext())
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct jobs stored, want 1000", len(seen))
	}
}

func TestSubmitTwiceIsDeduplicated(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	jobs := makeJobs(1000)
	for range 2 {
		if err := c.Submit(ctx, "g", jobs...); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.submitCount(t); n != 1000 {
		t.Fatalf("SUBMIT holds %d messages after submitting twice, want 1000", n)
	}
}

func TestSubmitInvalidPublishesNothing(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	bad := func(i int, f func(*client.Job)) []client.Job {
		jobs := makeJobs(1000)
		f(&jobs[i])
		return jobs
	}
	tests := []struct {
		name    string
		gid     string
		jobs    []client.Job
		want    []string
		invalid bool
	}{
		{"job id with a dot", "g", bad(500, func(j *client.Job) { j.ID = "a.b" }), []string{"jobs[500]", "jobId"}, true},
		{"empty type", "g", bad(999, func(j *client.Job) { j.Type = "" }), []string{"jobs[999]", "type"}, true},
		{"bad priority", "g", bad(3, func(j *client.Job) { j.Priority = "urgent" }), []string{"jobs[3]", "priority"}, true},
		{"payload not JSON", "g", bad(0, func(j *client.Job) { j.Payload = json.RawMessage("{") }), []string{"jobs[0]", "payload"}, true},
		{"payload too large", "g", bad(7, func(j *client.Job) {
			j.Payload = json.RawMessage(`"` + strings.Repeat("x", contracts.DefaultMaxPayloadBytes) + `"`)
		}), []string{"jobs[7]", "payload"}, true},
		{"repeated job id", "g", bad(10, func(j *client.Job) { j.ID = "job-0002" }), []string{"jobs[10]", "jobId", "jobs[2]"}, false},
		{"bad group id", "g:1", makeJobs(2), []string{"groupId"}, true},
	}
	for _, tt := range tests {
		err := c.Submit(ctx, tt.gid, tt.jobs...)
		if err == nil {
			t.Errorf("%s: Submit succeeded", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
		if errors.Is(err, contracts.ErrInvalid) != tt.invalid {
			t.Errorf("%s: errors.Is(err, ErrInvalid) = %v", tt.name, !tt.invalid)
		}
		var se *client.SubmitError
		if errors.As(err, &se) {
			t.Errorf("%s: validation failure reported as a SubmitError", tt.name)
		}
	}
	if n := b.submitCount(t); n != 0 {
		t.Fatalf("SUBMIT holds %d messages after invalid submits, want 0", n)
	}
	if n := len(b.spans.Ended()); n != 0 {
		t.Fatalf("%d spans for calls that published nothing", n)
	}
}

func TestSubmitNoJobs(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	if err := c.Submit(context.Background(), "g"); err != nil {
		t.Fatal(err)
	}
	if n := b.submitCount(t); n != 0 {
		t.Fatalf("SUBMIT holds %d messages", n)
	}
}

func TestSubmitPartialFailure(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{Prefix: "tiny"}
	// A submit stream that refuses messages beyond the third.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: n.StreamSubmit(), Subjects: []string{n.SubmitAll()}, MaxMsgs: 3, Discard: jetstream.DiscardNew,
	}); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	c := client.New(js, client.Options{Names: n, MaxPending: 1, TracerProvider: tp})

	err := c.Submit(ctx, "g", makeJobs(10)...)
	var se *client.SubmitError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *SubmitError", err)
	}
	if want := []int{3, 4, 5, 6, 7, 8, 9}; !slices.Equal(se.Failed, want) {
		t.Fatalf("Failed = %v, want %v", se.Failed, want)
	}
	if se.Err == nil || !errors.Is(err, se.Err) || !strings.Contains(err.Error(), "7 job(s)") {
		t.Fatalf("error %q (Err %v)", err, se.Err)
	}
	if got, _ := natsutil.StreamMsgs(ctx, js, n.StreamSubmit()); got != 3 {
		t.Fatalf("stream holds %d messages, want 3", got)
	}
	if ended := spans.Ended(); len(ended) != 1 || ended[0].Status().Code.String() != "Error" {
		t.Fatalf("submit span not marked as failed: %v", ended)
	}

	// Without any stream, every job fails.
	c2 := client.New(js, client.Options{Names: contracts.Names{Prefix: "nostream"}})
	if err := c2.Submit(ctx, "g", makeJobs(2)...); !errors.As(err, &se) || !slices.Equal(se.Failed, []int{0, 1}) ||
		!errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("err = %v, want both jobs failed with ErrNoStreamResponse", err)
	}
}

func TestSealAndCancel(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	if err := c.Seal(ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Seal(ctx, "g", 1000); err != nil { // a repeated seal is deduplicated
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := c.Seal(ctx, "g", -1); err == nil || !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "total") {
		t.Fatalf("Seal with a negative total: %v", err)
	}
	if err := c.Cancel(ctx, "bad group"); err == nil || !strings.Contains(err.Error(), "groupId") {
		t.Fatalf("Cancel with a bad group id: %v", err)
	}

	msgs := b.stored(t)
	if len(msgs) != 2 {
		t.Fatalf("SUBMIT holds %d messages, want a seal and a cancel", len(msgs))
	}
	seal, err := contracts.DecodeSubmission(msgs[0].Subject, msgs[0].Data, contracts.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if seal.Kind != contracts.KindSeal || seal.GroupID != "g" || seal.Total == nil || *seal.Total != 1000 {
		t.Fatalf("seal body %s", msgs[0].Data)
	}
	if got, want := msgs[0].Header.Get(jetstream.MsgIDHeader), contracts.SealMsgID("g", 1000); got != want {
		t.Fatalf("seal Nats-Msg-Id %q, want %q", got, want)
	}
	cancel, err := contracts.DecodeSubmission(msgs[1].Subject, msgs[1].Data, contracts.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if cancel.Kind != contracts.KindCancel || cancel.GroupID != "g" || cancel.Total != nil {
		t.Fatalf("cancel body %s", msgs[1].Data)
	}
	if got, want := msgs[1].Header.Get(jetstream.MsgIDHeader), contracts.CancelMsgID("g"); got != want {
		t.Fatalf("cancel Nats-Msg-Id %q, want %q", got, want)
	}
	for _, m := range msgs {
		if m.Header.Get("traceparent") == "" && m.Header.Get("Traceparent") == "" {
			t.Fatalf("%s carries no trace context: %v", m.Data, m.Header)
		}
	}
	names := []string{}
	for _, s := range b.spans.Ended() {
		names = append(names, s.Name())
	}
	if want := []string{"bulkaction.seal", "bulkaction.seal", "bulkaction.cancel"}; !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
}

func TestSealWithoutStream(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	c := client.New(js, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Seal(ctx, "g", 1); err == nil {
		t.Fatal("Seal succeeded without a stream")
	}
}

func TestNewNilJetStreamPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	client.New(nil, client.Options{})
}

// mustJS returns a JetStream handle on a fresh server without streams.
func mustJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, _, js := testenv.NATS(t)
	return js
}
