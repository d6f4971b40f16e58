package handoff_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestMain(m *testing.M) { pipelinetest.Main(m) }

// tenant is the tenant of the tests' groups.
const tenant = "t1"

// pack is the pack size of the tests of packs (the fetcher's and
// dispatcher's ReadyPackJobs).
const pack = 8

// lease enqueues n jobs per group (of tenant) and admits them all.
func lease(t *testing.T, e *pipelinetest.Env, groups []string, n int, trace string) []redisq.LeasedJob {
	t.Helper()
	var jobs []redisq.Job
	for _, g := range groups {
		for i := range n {
			jobs = append(jobs, redisq.Job{Group: contracts.Group(tenant, g), ID: fmt.Sprintf("j%03d", i), Type: "type-" + g,
				Payload: []byte(fmt.Sprintf(`{"g":%q,"i":%d}`, g, i)), Trace: trace})
		}
	}
	return e.Lease(t, jobs)
}

// publish hands jobs to READY in packs of up to packJobs jobs.
func publish(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, packJobs int, span string, attrs ...attribute.KeyValue) ([]redisq.LeasedJob, error) {
	return handoff.Publish(ctx, d, jobs, handoff.Packing{Jobs: packJobs}, span, attrs...)
}

// stored returns every message of the READY stream, in order.
func stored(t *testing.T, e *pipelinetest.Env) []*jetstream.RawStreamMsg {
	t.Helper()
	return e.StoredMsgs(t, e.Names.StreamReady())
}

func TestPublishPublishesAndConfirms(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	jobs := lease(t, e, []string{"ga", "gb"}, 25, "")
	if got := e.Inflight(t); got != 50 {
		t.Fatalf("inflight %d before publish, want 50", got)
	}
	ok, err := publish(context.Background(), e.Deps(), jobs, pack, handoff.SpanAdmit)
	if err != nil {
		t.Fatal(err)
	}
	if len(ok) != len(jobs) {
		t.Fatalf("confirmed %d of %d", len(ok), len(jobs))
	}
	if got := e.Inflight(t); got != 0 {
		t.Fatalf("inflight %d after publish, want 0 (all confirmed)", got)
	}
	// Each type's 25 jobs go in packs of at most pack, of even
	// sizes (7, 6, 6, 6), in order of tenant, group and id.
	msgs := stored(t, e)
	perType := (25 + pack - 1) / pack
	if len(msgs) != 2*perType {
		t.Fatalf("READY holds %d messages, want %d", len(msgs), 2*perType)
	}
	byID := map[string]redisq.LeasedJob{}
	for _, j := range jobs {
		byID[j.Type+"/"+j.ID] = j
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if n := len(rb.Jobs); n < 25/perType || n > (25+perType-1)/perType {
			t.Errorf("message %d carries %d jobs, want 25 split evenly in %d", i, n, perType)
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), rb.MsgID(); got != want {
			t.Errorf("message %d: Nats-Msg-Id %q, want %q", i, got, want)
		}
		if tps := m.Header.Values(handoff.HeaderJobTraceparent); len(tps) != len(rb.Jobs) {
			t.Errorf("message %d: %d job traceparents for %d jobs", i, len(tps), len(rb.Jobs))
		}
		for k, rj := range rb.Jobs {
			j, ok := byID[rj.Type+"/"+rj.JobID]
			if !ok || seen[rj.Type+"/"+rj.JobID] {
				t.Fatalf("message %d: job %s/%s unknown or twice", i, rj.Type, rj.JobID)
			}
			seen[rj.Type+"/"+rj.JobID] = true
			if k > 0 && rb.Jobs[k-1].JobID >= rj.JobID {
				t.Errorf("message %d: %s after %s, want id order", i, rj.JobID, rb.Jobs[k-1].JobID)
			}
			if want := e.Names.ReadyPack(j.Type, len(rb.Jobs)); m.Subject != want {
				t.Errorf("message %d on %s, want %s", i, m.Subject, want)
			}
			var n int
			fmt.Sscanf(j.ID, "j%d", &n)
			want := fmt.Sprintf(`{"g":%q,"i":%d}`, j.Group.ID, n)
			if rj.Ref() != j.Group || rj.Tenant != tenant || rj.JobID != j.ID || rj.Type != j.Type || rj.Attempt != 1 || string(rj.Payload) != want {
				t.Errorf("message %d = %+v payload %s, want %s/%s %s attempt 1 payload %s", i, rj, rj.Payload, j.Group, j.ID, j.Type, want)
			}
		}
	}
	if len(seen) != len(jobs) {
		t.Fatalf("READY holds %d jobs, want %d", len(seen), len(jobs))
	}
	// Each job was confirmed with its pack's READY sequence.
	for _, j := range ok {
		if j.ReadySeq < msgs[0].Sequence || j.ReadySeq > msgs[len(msgs)-1].Sequence {
			t.Errorf("%s confirmed with READY sequence %d, not one of its packs'", j.ID, j.ReadySeq)
		}
	}

	// Publishing the same attempts again (an expired lease re-published), in
	// another order, makes the same packs: JetStream's duplicate window drops
	// them.
	again := slices.Clone(jobs)
	slices.Reverse(again)
	ok2, err := publish(context.Background(), e.Deps(), again, pack, handoff.SpanReclaim)
	if err != nil || len(ok2) != len(jobs) {
		t.Fatalf("re-publish: %d confirmed, %v", len(ok2), err)
	}
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != uint64(len(msgs)) {
		t.Fatalf("READY holds %d messages after a re-publish, want %d", got, len(msgs))
	}
	for _, j := range ok2 {
		if j.ReadySeq == 0 || j.ReadySeq > msgs[len(msgs)-1].Sequence {
			t.Errorf("%s re-confirmed with READY sequence %d, want its stored pack's", j.ID, j.ReadySeq)
		}
	}
}

func TestPublishFailureLeavesLeaseForReclaim(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{Lease: 200 * time.Millisecond})
	ctx := context.Background()
	// READY refuses messages beyond the first: 10 jobs make two packs of 5.
	st, err := e.JS.Stream(ctx, e.Names.StreamReady())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	if _, err := e.JS.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	jobs := lease(t, e, []string{"g"}, 10, "")
	ok, err := publish(ctx, e.Deps(), jobs, pack, handoff.SpanAdmit)
	if err == nil || !strings.Contains(err.Error(), "5 of 10") {
		t.Fatalf("err = %v, want 5 of 10 jobs not published", err)
	}
	if len(ok) != 5 {
		t.Fatalf("confirmed %d jobs, want the 5 stored", len(ok))
	}
	if got := e.Inflight(t); got != 5 {
		t.Fatalf("inflight %d, want the 5 unpublished jobs still leased", got)
	}

	// The failed jobs come back once their lease expires, with the same
	// attempt, and go through when READY has room.
	if _, err := e.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var again []redisq.LeasedJob
	testkit.WaitFor(t, "expired leases", 5*time.Second, func() bool {
		r, err := e.Queue.Reclaim(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, r.Jobs...)
		return len(again) >= 5
	})
	okIDs := map[string]bool{}
	for _, j := range ok {
		okIDs[j.ID] = true
	}
	for _, j := range again {
		if okIDs[j.ID] || j.Attempt != 1 {
			t.Fatalf("reclaimed %s attempt %d: want only unpublished jobs, attempt 1", j.ID, j.Attempt)
		}
	}
	if ok2, err := publish(ctx, e.Deps(), again, pack, handoff.SpanReclaim); err != nil || len(ok2) != 5 {
		t.Fatalf("re-publish: %d confirmed, %v", len(ok2), err)
	}
	var ids []string
	for _, m := range stored(t, e) {
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rj := range rb.Jobs {
			ids = append(ids, rj.JobID)
		}
	}
	slices.Sort(ids)
	want := []string{"j000", "j001", "j002", "j003", "j004", "j005", "j006", "j007", "j008", "j009"}
	if !slices.Equal(ids, want) {
		t.Fatalf("READY holds %v, want each of %v once", ids, want)
	}
	if got := e.Inflight(t); got != 0 {
		t.Fatalf("inflight %d, want 0", got)
	}
}

func TestPublishContinuesStoredTrace(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	tp, rec := testkit.RecordSpans(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	jobs := lease(t, e, []string{"g"}, 3, "00-"+traceID+"-"+parentID+"-01")
	d := e.Deps()
	d.TracerProvider = tp
	if _, err := publish(context.Background(), d, jobs, pack, handoff.SpanAdmit, handoff.AttrDecision.String(handoff.DecisionReady)); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	bySpanID := map[string]sdktrace.ReadOnlySpan{}
	for i, s := range spans {
		bySpanID[s.SpanContext().SpanID().String()] = s
		if s.Name() != handoff.SpanAdmit {
			t.Errorf("span %d named %q", i, s.Name())
		}
		if s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID {
			t.Errorf("span %d: trace %s parent %s, want %s %s", i, s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentID)
		}
		attrs := attribute.NewSet(s.Attributes()...)
		for k, want := range map[attribute.Key]string{
			handoff.AttrTenant: tenant, handoff.AttrGroupID: "g", handoff.AttrJobType: "type-g", handoff.AttrDecision: handoff.DecisionReady,
		} {
			if v, ok := attrs.Value(k); !ok || v.AsString() != want {
				t.Errorf("span %d: %s = %v, want %s", i, k, v.Emit(), want)
			}
		}
		if v, ok := attrs.Value(handoff.AttrAttempt); !ok || v.AsInt64() != 1 {
			t.Errorf("span %d: attempt %v", i, v.Emit())
		}
		if v, ok := attrs.Value(handoff.AttrJobID); !ok || !strings.HasPrefix(v.AsString(), "j00") {
			t.Errorf("span %d: job id %v", i, v.Emit())
		}
	}
	// The pack's traceparent is its first job's admit span; the job
	// traceparents name each job's own.
	msgs := stored(t, e)
	if len(msgs) != 1 {
		t.Fatalf("%d READY messages, want one pack of 3", len(msgs))
	}
	m := msgs[0]
	rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	spanOf := func(tpHdr string) sdktrace.ReadOnlySpan {
		t.Helper()
		parts := strings.Split(tpHdr, "-")
		if len(parts) != 4 || parts[1] != traceID {
			t.Fatalf("traceparent %q, want trace %s", tpHdr, traceID)
		}
		s, ok := bySpanID[parts[2]]
		if !ok {
			t.Fatalf("traceparent %q does not name an admit span", tpHdr)
		}
		return s
	}
	jobOf := func(s sdktrace.ReadOnlySpan) string {
		set := attribute.NewSet(s.Attributes()...)
		v, _ := set.Value(handoff.AttrJobID)
		return v.AsString()
	}
	if got := jobOf(spanOf(m.Header.Get("Traceparent"))); got != rb.Jobs[0].JobID {
		t.Errorf("traceparent names the span of %s, want the first job's, %s", got, rb.Jobs[0].JobID)
	}
	tps := m.Header.Values(handoff.HeaderJobTraceparent)
	if len(tps) != len(rb.Jobs) {
		t.Fatalf("%d job traceparents for %d jobs", len(tps), len(rb.Jobs))
	}
	for k, tpHdr := range tps {
		if got := jobOf(spanOf(tpHdr)); got != rb.Jobs[k].JobID {
			t.Errorf("job traceparent %d names the span of %s, want %s's", k, got, rb.Jobs[k].JobID)
		}
	}
}

func TestTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	if got := handoff.Traceparent(ctx); got != tp {
		t.Fatalf("Traceparent = %q, want %q", got, tp)
	}
	if got := handoff.Traceparent(context.Background()); got != "" {
		t.Fatalf("Traceparent of no span = %q, want empty", got)
	}
}

func TestPublishNothing(t *testing.T) {
	ok, err := publish(context.Background(), pipelinetest.NewEnv(t, redisq.Config{}).Deps(), nil, pack, handoff.SpanAdmit)
	if ok != nil || err != nil {
		t.Fatalf("Publish(nil) = %v, %v", ok, err)
	}
}

// Two tenants' groups of the same id, with the same job ids, are different
// jobs: their READY messages carry their tenant, and the duplicate window
// (message ids name the tenant, or digest ids that do) keeps both.
func TestPublishKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	var jobs []redisq.Job
	for _, tenant := range []string{"acme", "globex"} {
		for i := range 5 {
			jobs = append(jobs, redisq.Job{Group: contracts.Group(tenant, "g"), ID: fmt.Sprintf("j%d", i), Type: "t"})
		}
	}
	leased := e.Lease(t, jobs)
	ok, err := publish(context.Background(), e.Deps(), leased, pack, handoff.SpanAdmit)
	if err != nil || len(ok) != len(jobs) {
		t.Fatalf("published %d of %d: %v", len(ok), len(jobs), err)
	}
	seen := map[string]bool{}
	for _, m := range stored(t, e) {
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rj := range rb.Jobs {
			key := rj.Ref().String() + "/" + rj.JobID
			if seen[key] {
				t.Errorf("%s published twice", key)
			}
			seen[key] = true
			if id := m.Header.Get(jetstream.MsgIDHeader); id != rb.MsgID() {
				t.Errorf("%s: Nats-Msg-Id %q, want %q", key, id, rb.MsgID())
			}
		}
	}
	if len(seen) != len(jobs) {
		t.Fatalf("READY holds %d distinct jobs, want %d", len(seen), len(jobs))
	}
}
