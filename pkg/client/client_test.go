package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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
	tp    trace.TracerProvider
}

// setup starts a server with the five streams and returns a client of the
// default tenant, with default options, whose spans b.spans records.
func setup(t *testing.T) (*client.Client, *testBundle) {
	t.Helper()
	return setupWith(t, client.Options{}, natsutil.StreamSettings{})
}

// setupWith is setup with the given client options (their TracerProvider
// is replaced) and stream settings.
func setupWith(t *testing.T, opts client.Options, ss natsutil.StreamSettings) (*client.Client, *testBundle) {
	t.Helper()
	_, _, js := testenv.NATS(t)
	b := &testBundle{js: js, names: opts.Names, spans: tracetest.NewSpanRecorder()}
	if err := natsutil.EnsureStreams(context.Background(), js, b.names, ss); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.tp = tp
	opts.TracerProvider = tp
	return client.New(js, opts), b
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

// decoded decodes a stored message on its own subject, as the fetcher does.
func decoded(t *testing.T, m *jetstream.RawStreamMsg, lim contracts.Limits) *contracts.Submission {
	t.Helper()
	sub, err := contracts.DecodeSubmission(m.Subject, m.Data, lim)
	if err != nil {
		t.Fatalf("stored message on %s does not decode: %v: %s", m.Subject, err, m.Data)
	}
	return sub
}

// bodyKeys returns the top-level keys of a stored body, sorted.
func bodyKeys(t *testing.T, data []byte) []string {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatalf("body %s: %v", data, err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// spanAttrs returns the attributes of span as a set.
func spanAttrs(span sdktrace.ReadOnlySpan) *attribute.Set {
	s := attribute.NewSet(span.Attributes()...)
	return &s
}

func makeJobs(n int) []client.Job {
	jobs := make([]client.Job, n)
	for i := range jobs {
		jobs[i] = client.Job{
			ID:      fmt.Sprintf("job-%04d", i),
			Type:    []string{"email", "sms"}[i%2],
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		}
	}
	return jobs
}

// storedJobs checks that the stored messages are jobs messages of g, each
// decoding on its subject with lim, with the Nats-Msg-Id of its jobs, and
// returns their jobs in stream order and the size of each message.
func storedJobs(t *testing.T, b *testBundle, g contracts.GroupRef, lim contracts.Limits) (jobs []contracts.SubmitJob, sizes []int) {
	t.Helper()
	for _, m := range b.stored(t) {
		sub := decoded(t, m, lim)
		if m.Subject != b.names.Submit(g) || sub.Kind != contracts.KindJobs || sub.Ref() != g {
			t.Fatalf("message on %s: %+v, want jobs of %s on %s", m.Subject, sub, g, b.names.Submit(g))
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), contracts.JobsMsgID(g, sub.Jobs); got != want {
			t.Fatalf("Nats-Msg-Id %q, want %q", got, want)
		}
		if keys := bodyKeys(t, m.Data); slices.Contains(keys, "tenant") || slices.Contains(keys, "groupId") {
			t.Fatalf("jobs body names its group (the subject does): %s", m.Data)
		}
		jobs = append(jobs, sub.Jobs...)
		sizes = append(sizes, len(sub.Jobs))
	}
	return jobs, sizes
}

// sameJobs fails unless got holds exactly want, in order.
func sameJobs(t *testing.T, got []contracts.SubmitJob, want []client.Job) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d jobs stored, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for i, j := range want {
		s := got[i]
		if seen[s.JobID] {
			t.Fatalf("job %q stored twice", s.JobID)
		}
		seen[s.JobID] = true
		if s.JobID != j.ID || s.Type != j.Type || string(s.Payload) != string(j.Payload) {
			t.Fatalf("stored job %d is %+v, submitted %+v", i, s, j)
		}
	}
}

func TestSubmitThousandJobs(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	const gid = "promo-1"
	g := contracts.Group(client.DefaultTenant, gid)
	jobs := makeJobs(1000)
	if c.Tenant() != client.DefaultTenant {
		t.Fatalf("Tenant() = %q, want %q", c.Tenant(), client.DefaultTenant)
	}
	if err := c.Submit(ctx, gid, jobs...); err != nil {
		t.Fatal(err)
	}

	spans := b.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	span := spans[0]
	if span.Name() != "bulkaction.submit" || span.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("span %q kind %v, want bulkaction.submit producer", span.Name(), span.SpanKind())
	}
	if span.InstrumentationScope().Name != client.TracerName {
		t.Fatalf("tracer %q", span.InstrumentationScope().Name)
	}
	attrs := spanAttrs(span)
	if v, _ := attrs.Value(client.AttrTenant); v.AsString() != client.DefaultTenant {
		t.Errorf("tenant attribute %q", v.AsString())
	}
	if v, _ := attrs.Value(client.AttrGroupID); v.AsString() != gid {
		t.Errorf("group id attribute %q", v.AsString())
	}
	if v, _ := attrs.Value(client.AttrJobCount); v.AsInt64() != 1000 {
		t.Errorf("job count attribute %d", v.AsInt64())
	}

	// 1000 jobs in messages of the default batch size: 10 messages of 100,
	// in order, every job once.
	got, sizes := storedJobs(t, b, g, contracts.Limits{})
	if want := slices.Repeat([]int{client.DefaultBatchSize}, 10); !slices.Equal(sizes, want) {
		t.Fatalf("messages of %v jobs, want %v", sizes, want)
	}
	sameJobs(t, got, jobs)
	for _, m := range b.stored(t) {
		if sub := decoded(t, m, contracts.Limits{}); sub.Group != nil {
			t.Fatalf("Submit sent group settings %+v", *sub.Group)
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(m.Header)))
		if !sc.IsValid() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
			t.Fatalf("message %d carries trace context %v, want the submit span %v", m.Sequence, sc, span.SpanContext())
		}
	}
}

func TestSubmitBatchSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		batch, jobs int
		want        []int
	}{
		{1, 3, []int{1, 1, 1}},
		{7, 20, []int{7, 7, 6}},
		{100, 100, []int{100}},
		{100, 1, []int{1}},
		{-1, 150, []int{100, 50}},               // 0 or less means 100
		{5000, 2500, []int{1000, 1000, 500}},    // at most contracts.MaxBatch
		{contracts.MaxBatch, 1000, []int{1000}}, // a full message
		{contracts.MaxBatch + 1, 1001, []int{1000, 1}},
	} {
		t.Run(fmt.Sprintf("batch %d jobs %d", tt.batch, tt.jobs), func(t *testing.T) {
			t.Parallel()
			c, b := setupWith(t, client.Options{BatchSize: tt.batch}, natsutil.StreamSettings{})
			jobs := makeJobs(tt.jobs)
			if err := c.Submit(context.Background(), "g", jobs...); err != nil {
				t.Fatal(err)
			}
			got, sizes := storedJobs(t, b, contracts.Group(client.DefaultTenant, "g"), contracts.Limits{})
			if !slices.Equal(sizes, tt.want) {
				t.Fatalf("messages of %v jobs, want %v", sizes, tt.want)
			}
			sameJobs(t, got, jobs)
		})
	}
}

// bigJobs returns n jobs whose payloads are strings of size bytes.
func bigJobs(n, size int) []client.Job {
	jobs := makeJobs(n)
	for i := range jobs {
		jobs[i].Payload = json.RawMessage(`"` + strings.Repeat(string(rune('a'+i%26)), size) + `"`)
	}
	return jobs
}

func TestSubmitSplitsAtMessageLimit(t *testing.T) {
	t.Parallel()
	// Messages of at most 4 KiB, streams that store nothing larger: 100
	// jobs of about 300 bytes each fit about 12 to a message.
	const limit = 4 << 10
	lim := contracts.Limits{MaxMessageBytes: limit}
	c, b := setupWith(t, client.Options{Limits: lim}, natsutil.StreamSettings{MaxMsgSize: limit})
	jobs := bigJobs(100, 300)
	if err := c.Submit(context.Background(), "g", jobs...); err != nil {
		t.Fatal(err)
	}
	got, sizes := storedJobs(t, b, contracts.Group(client.DefaultTenant, "g"), lim)
	sameJobs(t, got, jobs)
	if len(sizes) < 100*300/limit+1 || len(sizes) >= 100 {
		t.Fatalf("messages of %v jobs: not split by the limit", sizes)
	}
	for _, m := range b.stored(t) {
		if len(m.Data) > limit {
			t.Fatalf("message %d of %d bytes, limit %d", m.Sequence, len(m.Data), limit)
		}
	}
}

// TestSubmitMessageFitsStreamLimit checks that a message the client sends
// is within the limit with its headers: a stream counts the headers (the
// Nats-Msg-Id, the trace context) in its maximum message size.
func TestSubmitMessageFitsStreamLimit(t *testing.T) {
	t.Parallel()
	const limit = 2048
	lim := contracts.Limits{MaxMessageBytes: limit}
	c, b := setupWith(t, client.Options{Limits: lim, BatchSize: 2}, natsutil.StreamSettings{MaxMsgSize: limit})
	// Two jobs whose body together is just under the limit: alone it
	// would fit, with its headers it does not.
	jobs := bigJobs(2, 0)
	empty, err := json.Marshal(contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs, Jobs: []contracts.SubmitJob{
		{JobID: jobs[0].ID, Type: jobs[0].Type, Payload: jobs[0].Payload},
		{JobID: jobs[1].ID, Type: jobs[1].Type, Payload: jobs[1].Payload},
	}})
	if err != nil {
		t.Fatal(err)
	}
	per := (limit - 20 - len(empty)) / 2
	jobs = bigJobs(2, per)
	if err := c.Submit(context.Background(), "g", jobs...); err != nil {
		t.Fatalf("jobs within the message limit not stored: %v", err)
	}
	got, _ := storedJobs(t, b, contracts.Group(client.DefaultTenant, "g"), lim)
	sameJobs(t, got, jobs)
}

func TestSubmitJobTooLargeForMessage(t *testing.T) {
	t.Parallel()
	const limit = 2048
	lim := contracts.Limits{MaxMessageBytes: limit}
	c, b := setupWith(t, client.Options{Limits: lim}, natsutil.StreamSettings{})
	jobs := bigJobs(10, 100)
	jobs[7].Payload = json.RawMessage(`"` + strings.Repeat("x", limit) + `"`) // within the payload limit, not the message's
	err := c.Submit(context.Background(), "g", jobs...)
	if err == nil {
		t.Fatal("Submit of a job larger than a message succeeded")
	}
	if !strings.Contains(err.Error(), "jobs[7]") || !errors.Is(err, contracts.ErrInvalid) || contracts.Reason(err) != contracts.ReasonTooLarge {
		t.Fatalf("error %q (reason %q), want too_large naming jobs[7]", err, contracts.Reason(err))
	}
	var se *client.SubmitError
	if errors.As(err, &se) {
		t.Fatalf("too large a job reported as a SubmitError: %v", err)
	}
	if n := b.submitCount(t); n != 0 {
		t.Fatalf("SUBMIT holds %d messages, want none", n)
	}
}

func TestSubmitTwiceIsDeduplicated(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	jobs := makeJobs(1000)
	if err := c.Submit(ctx, "g", jobs...); err != nil {
		t.Fatal(err)
	}
	first := b.stored(t)
	if err := c.Submit(ctx, "g", jobs...); err != nil {
		t.Fatal(err)
	}
	if n := b.submitCount(t); n != 10 {
		t.Fatalf("SUBMIT holds %d messages after submitting twice, want 10", n)
	}
	// The same call builds the same messages with the same ids.
	var ids []string
	g := contracts.Group(client.DefaultTenant, "g")
	for i, m := range first {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if want := contracts.JobsMsgID(g, decoded(t, m, contracts.Limits{}).Jobs); id != want || slices.Contains(ids, id) {
			t.Fatalf("message %d: Nats-Msg-Id %q, want %q, distinct", i, id, want)
		}
		ids = append(ids, id)
	}

	// A single job's message id is that of the job.
	if err := c.Submit(ctx, "g", client.Job{ID: "one", Type: "email"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, "g", client.Job{ID: "one", Type: "email"}); err != nil {
		t.Fatal(err)
	}
	msgs := b.stored(t)
	if len(msgs) != 11 {
		t.Fatalf("SUBMIT holds %d messages, want 11", len(msgs))
	}
	if got, want := msgs[10].Header.Get(jetstream.MsgIDHeader), contracts.SubmitMsgID(g, "one"); got != want {
		t.Fatalf("Nats-Msg-Id %q, want %q", got, want)
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
	var none contracts.GroupSettings
	tests := []struct {
		name     string
		c        *client.Client
		gid      string
		settings contracts.GroupSettings
		jobs     []client.Job
		want     []string
		avoid    string // a job the error must not blame
		invalid  bool
	}{
		{"job id with a dot", c, "g", none, bad(500, func(j *client.Job) { j.ID = "a.b" }), []string{"jobs[500]", "jobId"}, "jobs[0]", true},
		{"empty type", c, "g", none, bad(999, func(j *client.Job) { j.Type = "" }), []string{"jobs[999]", "type"}, "jobs[0]", true},
		{"payload not JSON", c, "g", none, bad(0, func(j *client.Job) { j.Payload = json.RawMessage("{") }), []string{"jobs[0]", "payload"}, "", true},
		{"payload too large", c, "g", none, bad(7, func(j *client.Job) {
			j.Payload = json.RawMessage(`"` + strings.Repeat("x", contracts.DefaultMaxPayloadBytes) + `"`)
		}), []string{"jobs[7]", "payload"}, "jobs[0]", true},
		{"repeated job id", c, "g", none, bad(10, func(j *client.Job) { j.ID = "job-0002" }), []string{"jobs[10]", "jobId", "jobs[2]"}, "", false},
		{"bad group id", c, "g:1", none, makeJobs(2), []string{"groupId"}, "jobs[", true},
		{"bad priority", c, "g", contracts.GroupSettings{Priority: "urgent"}, makeJobs(3), []string{"group.priority", "urgent"}, "jobs[", true},
		{"negative maxInFlight", c, "g", contracts.GroupSettings{MaxInFlight: -1}, makeJobs(3), []string{"group.maxInFlight"}, "jobs[", true},
		{"maxInFlight too large", c, "g", contracts.GroupSettings{MaxInFlight: contracts.MaxInFlight + 1}, makeJobs(3), []string{"group.maxInFlight"}, "jobs[", true},
		{"basePriority too small", c, "g", contracts.GroupSettings{BasePriority: contracts.MinBasePriority - 1}, makeJobs(3), []string{"group.basePriority"}, "jobs[", true},
		{"bad tenant", client.New(b.js, client.Options{Tenant: "a.b", TracerProvider: b.tp}), "g", none, makeJobs(3), []string{"tenant"}, "jobs[", true},
		{"bad tenant of ForTenant", c.ForTenant("a b"), "g", none, makeJobs(3), []string{"tenant"}, "jobs[", true},
	}
	for _, tt := range tests {
		err := tt.c.SubmitGroup(ctx, tt.gid, tt.settings, tt.jobs...)
		if err == nil {
			t.Errorf("%s: Submit succeeded", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
		if tt.avoid != "" && strings.Contains(err.Error(), tt.avoid) {
			t.Errorf("%s: error %q mentions %q", tt.name, err, tt.avoid)
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
	if err := c.SubmitGroup(context.Background(), "g", contracts.GroupSettings{MaxInFlight: 5}); err != nil {
		t.Fatal(err)
	}
	if n := b.submitCount(t); n != 0 {
		t.Fatalf("SUBMIT holds %d messages", n)
	}
}

func TestSubmitGroupSettings(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	settings := contracts.GroupSettings{Priority: contracts.PriorityHigh, BasePriority: -500, MaxInFlight: 10}
	jobs := makeJobs(250)
	if err := c.SubmitGroup(ctx, "g", settings, jobs...); err != nil {
		t.Fatal(err)
	}
	g := contracts.Group(client.DefaultTenant, "g")
	got, sizes := storedJobs(t, b, g, contracts.Limits{})
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("messages of %v jobs", sizes)
	}
	sameJobs(t, got, jobs)
	for _, m := range b.stored(t) {
		sub := decoded(t, m, contracts.Limits{})
		if sub.Group == nil || !reflect.DeepEqual(*sub.Group, settings) {
			t.Fatalf("message %d carries group %v, want %+v: %.200s", m.Sequence, sub.Group, settings, m.Data)
		}
	}
	spans := b.spans.Ended()
	if len(spans) != 1 || spans[0].Name() != "bulkaction.submit" {
		t.Fatalf("spans %v", spans)
	}
}

func TestTenantSubjects(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	acme := client.New(b.js, client.Options{Tenant: "acme", TracerProvider: b.tp})
	globex := acme.ForTenant("globex")
	if acme.Tenant() != "acme" || globex.Tenant() != "globex" {
		t.Fatalf("tenants %q and %q", acme.Tenant(), globex.Tenant())
	}
	// The same group id and the same job ids: two groups, two messages.
	jobs := makeJobs(3)
	if err := acme.Submit(ctx, "promo", jobs...); err != nil {
		t.Fatal(err)
	}
	if err := globex.Submit(ctx, "promo", jobs...); err != nil {
		t.Fatal(err)
	}
	if err := globex.Seal(ctx, "promo", 3); err != nil {
		t.Fatal(err)
	}
	msgs := b.stored(t)
	want := []string{"bulkaction.submit.acme.promo", "bulkaction.submit.globex.promo", "bulkaction.submit.globex.promo"}
	var subjects []string
	for _, m := range msgs {
		subjects = append(subjects, m.Subject)
	}
	if !slices.Equal(subjects, want) {
		t.Fatalf("subjects %v, want %v", subjects, want)
	}
	for i, tenant := range []string{"acme", "globex"} {
		g := contracts.Group(tenant, "promo")
		sub := decoded(t, msgs[i], contracts.Limits{})
		if sub.Ref() != g || msgs[i].Header.Get(jetstream.MsgIDHeader) != contracts.JobsMsgID(g, sub.Jobs) {
			t.Fatalf("message %d: %+v, Nats-Msg-Id %q", i, sub, msgs[i].Header.Get(jetstream.MsgIDHeader))
		}
	}
	if got, want := msgs[2].Header.Get(jetstream.MsgIDHeader), contracts.SealMsgID(contracts.Group("globex", "promo"), 3); got != want {
		t.Fatalf("seal Nats-Msg-Id %q, want %q", got, want)
	}

	// Spans name the tenant of the client that made them.
	var tenants []string
	for _, s := range b.spans.Ended() {
		v, _ := spanAttrs(s).Value(client.AttrTenant)
		id, _ := spanAttrs(s).Value(client.AttrGroupID)
		if id.AsString() != "promo" {
			t.Fatalf("span %s group id %q", s.Name(), id.AsString())
		}
		tenants = append(tenants, v.AsString())
	}
	if !slices.Equal(tenants, []string{"acme", "globex", "globex"}) {
		t.Fatalf("span tenants %v", tenants)
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
	c := client.New(js, client.Options{Names: n, MaxPending: 1, BatchSize: 2, TracerProvider: tp})

	// Five messages of two jobs: the last two are refused, and with them
	// jobs 6 to 9.
	err := c.Submit(ctx, "g", makeJobs(10)...)
	var se *client.SubmitError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *SubmitError", err)
	}
	if want := []int{6, 7, 8, 9}; !slices.Equal(se.Failed, want) {
		t.Fatalf("Failed = %v, want %v", se.Failed, want)
	}
	if se.Err == nil || !errors.Is(err, se.Err) || !strings.Contains(err.Error(), "4 job(s)") || !strings.Contains(err.Error(), "jobs[6]") {
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

// controlBody checks that a control message's body carries only v, kind
// and (for a seal) total: the subject names the group.
func controlBody(t *testing.T, m *jetstream.RawStreamMsg, kind contracts.Kind) *contracts.Submission {
	t.Helper()
	want := []string{"kind", "v"}
	if kind == contracts.KindSeal {
		want = []string{"kind", "total", "v"}
	}
	if keys := bodyKeys(t, m.Data); !slices.Equal(keys, want) {
		t.Fatalf("%s body %s has keys %v, want %v", kind, m.Data, keys, want)
	}
	sub := decoded(t, m, contracts.Limits{})
	if sub.Kind != kind || sub.Ref() != contracts.Group(client.DefaultTenant, "g") || m.Subject != "bulkaction.submit.default.g" {
		t.Fatalf("message on %s: %+v, want %s of default/g", m.Subject, sub, kind)
	}
	return sub
}

func TestSealAndCancel(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	g := contracts.Group(client.DefaultTenant, "g")
	if err := c.Seal(ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Seal(ctx, "g", 1000); err != nil { // a repeated seal is deduplicated
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "g"); err != nil { // so is a repeated cancel
		t.Fatal(err)
	}
	if err := c.Seal(ctx, "g", -1); err == nil || !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "total") {
		t.Fatalf("Seal with a negative total: %v", err)
	}
	if err := c.Cancel(ctx, "bad group"); err == nil || !strings.Contains(err.Error(), "groupId") {
		t.Fatalf("Cancel with a bad group id: %v", err)
	}
	if err := c.ForTenant("a.b").Seal(ctx, "g", 1); err == nil || !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("Seal with a bad tenant: %v", err)
	}

	msgs := b.stored(t)
	if len(msgs) != 2 {
		t.Fatalf("SUBMIT holds %d messages, want a seal and a cancel", len(msgs))
	}
	if seal := controlBody(t, msgs[0], contracts.KindSeal); seal.Total == nil || *seal.Total != 1000 {
		t.Fatalf("seal body %s", msgs[0].Data)
	}
	if got, want := msgs[0].Header.Get(jetstream.MsgIDHeader), contracts.SealMsgID(g, 1000); got != want {
		t.Fatalf("seal Nats-Msg-Id %q, want %q", got, want)
	}
	if cancel := controlBody(t, msgs[1], contracts.KindCancel); cancel.Total != nil {
		t.Fatalf("cancel body %s", msgs[1].Data)
	}
	if got, want := msgs[1].Header.Get(jetstream.MsgIDHeader), contracts.CancelMsgID(g); got != want {
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
		attrs := spanAttrs(s)
		if v, _ := attrs.Value(client.AttrTenant); v.AsString() != client.DefaultTenant {
			t.Errorf("%s: tenant attribute %q", s.Name(), v.AsString())
		}
		if v, _ := attrs.Value(client.AttrGroupID); v.AsString() != "g" {
			t.Errorf("%s: group id attribute %q", s.Name(), v.AsString())
		}
	}
	if want := []string{"bulkaction.seal", "bulkaction.seal", "bulkaction.cancel", "bulkaction.cancel"}; !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	// pause, pause, resume, pause: none carries a Nats-Msg-Id, so none is
	// deduplicated.
	for _, f := range []func(context.Context, string) error{c.Pause, c.Pause, c.Resume, c.Pause} {
		if err := f(ctx, "g"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Pause(ctx, "a.b"); err == nil || !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "groupId") {
		t.Fatalf("Pause with a bad group id: %v", err)
	}
	if err := c.ForTenant("").Resume(ctx, "g"); err == nil || !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("Resume with an empty tenant: %v", err)
	}

	msgs := b.stored(t)
	want := []contracts.Kind{contracts.KindPause, contracts.KindPause, contracts.KindResume, contracts.KindPause}
	if len(msgs) != len(want) {
		t.Fatalf("SUBMIT holds %d messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		controlBody(t, m, want[i])
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			t.Fatalf("%s carries Nats-Msg-Id %q", want[i], id)
		}
		if m.Header.Get("traceparent") == "" && m.Header.Get("Traceparent") == "" {
			t.Fatalf("%s carries no trace context: %v", m.Data, m.Header)
		}
	}
	var names []string
	for _, s := range b.spans.Ended() {
		names = append(names, s.Name())
		attrs := spanAttrs(s)
		if v, _ := attrs.Value(client.AttrTenant); v.AsString() != client.DefaultTenant {
			t.Errorf("%s: tenant attribute %q", s.Name(), v.AsString())
		}
		if v, _ := attrs.Value(client.AttrGroupID); v.AsString() != "g" {
			t.Errorf("%s: group id attribute %q", s.Name(), v.AsString())
		}
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s: kind %v", s.Name(), s.SpanKind())
		}
	}
	if want := []string{"bulkaction.pause", "bulkaction.pause", "bulkaction.resume", "bulkaction.pause"}; !slices.Equal(names, want) {
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
	if err := c.Pause(ctx, "g"); err == nil {
		t.Fatal("Pause succeeded without a stream")
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
