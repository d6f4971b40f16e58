package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

// completedOnceLast checks a completed group's events: exactly one
// COMPLETED event, the last, with total jobs done; every event before it
// is a progress event of the running group that counts fewer.
func completedOnceLast(t *testing.T, evs []contracts.GroupEvent, total int64) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	last := evs[len(evs)-1]
	if last.State != contracts.StateCompleted || last.Total != total || last.Succeeded+last.Failed != total {
		t.Fatalf("last event %+v, want COMPLETED with %d jobs done", last, total)
	}
	for _, ev := range evs[:len(evs)-1] {
		if ev.State.Terminal() || ev.Succeeded+ev.Failed >= total {
			t.Fatalf("event %+v before the COMPLETED one (events %+v)", ev, evs)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		cfg  aggregator.Config
		want string
	}{
		{aggregator.Config{BatchSize: -1}, "BatchSize"},
		{aggregator.Config{Durable: "a b"}, "Durable"},
		{aggregator.Config{StuckAfter: -time.Second}, "StuckAfter"},
		{aggregator.Config{StuckCheckEvery: -time.Second}, "StuckCheckEvery"},
		{aggregator.Config{AckWait: time.Millisecond}, "AckWait"},
		{aggregator.Config{CallbackRetryFor: -time.Second}, "CallbackRetryFor"},
		{aggregator.Config{CallbackAllowedHosts: []string{"http://x"}}, "AllowedHosts"},
	} {
		if _, err := aggregator.New(tt.cfg, b.d); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tt.cfg, err, tt.want)
		}
	}
	a, err := aggregator.New(aggregator.Config{}, b.d)
	if err != nil {
		t.Fatal(err)
	}
	want := aggregator.Config{BatchSize: 256, Durable: "aggregator", StuckAfter: 5 * time.Minute,
		StuckCheckEvery: 30 * time.Second, AckWait: 30 * time.Second, GroupIdleTTL: 7 * 24 * time.Hour,
		CallbackRetryFor: 24 * time.Hour, CallbackFirstRetry: 5 * time.Second, CallbackTimeout: 10 * time.Second}
	if got := a.Config(); !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
}

func TestExactCounts(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t)
	d, m := b.newDeps()
	b.admitted(t, "g", 20, 20)
	b.admitted(t, "open", 5, -1) // not sealed: it cannot complete
	for i := 0; i < 20; i += 3 { // these fail at their second attempt
		b.rdb.HSet(context.Background(), b.env.Keys.Job(grp("g"), fmt.Sprintf("j%d", i)), "attempt", 2)
	}

	// One result carries a trace; its record span continues it.
	root := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled})
	traced := nats.Header{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), root), propagation.HeaderCarrier(traced))

	run(t, aggregator.Config{BatchSize: 7}, d, nil)
	for i := range 20 {
		r := success("g", fmt.Sprintf("j%d", i), 1)
		if i%3 == 0 {
			r = failure("g", fmt.Sprintf("j%d", i), 2, "boom")
		}
		var h nats.Header
		if i == 5 {
			h = traced
		}
		b.publish(t, r, "", h)
	}
	for i := range 5 {
		b.publish(t, success("open", fmt.Sprintf("j%d", i), 1), "", nil)
	}

	ev := b.waitEvent(t, "g", contracts.StateCompleted)
	if ev.Total != 20 || ev.Jobs != 20 || ev.Succeeded != 13 || ev.Failed != 7 || ev.Cancelled != 0 {
		t.Fatalf("COMPLETED event = %+v, want 13 succeeded and 7 failed of 20", ev)
	}
	b.waitSettled(t)
	completedOnceLast(t, b.events(t, "g"), 20)
	// The unsealed group cannot complete: its progress events carry its
	// counts, the last one its final counts.
	testkit.WaitFor(t, "open's last event with its 5 results", 3*time.Second, func() bool {
		evs := b.events(t, "open")
		return len(evs) > 0 && evs[len(evs)-1].Succeeded == 5
	})
	for _, ev := range b.events(t, "open") {
		if ev.State != contracts.StateRunning || ev.Jobs != 5 || ev.Failed != 0 || ev.Succeeded < 1 {
			t.Fatalf("event of open %+v", ev)
		}
	}
	if g := b.group(t, "g"); g.Done != 20 || g.Succeeded != 13 || g.Failed != 7 || g.State != contracts.StateCompleted {
		t.Fatalf("g = %+v", g.GroupCounts)
	}
	if g := b.group(t, "open"); g.Done != 5 || g.Succeeded != 5 || g.State != contracts.StateRunning {
		t.Fatalf("open = %+v", g.GroupCounts)
	}
	for status, want := range map[string]int{telemetry.StatusSuccess: 18, telemetry.StatusFailed: 7, telemetry.StatusDuplicate: 0} {
		if n := counterValue(m.RecordedResults.WithLabelValues(status)); n != want {
			t.Errorf("recorded_results{%s} = %d, want %d", status, n, want)
		}
	}
	if n := counterValue(m.GroupCompletions.WithLabelValues(telemetry.StateCompleted)); n != 1 {
		t.Errorf("group_completions{COMPLETED} = %d, want 1", n)
	}
	if n := histogramCount(m.SubmitLatency); n != 25 {
		t.Errorf("job_latency_ms observed %d times, want 25", n)
	}

	var records, child int
	for _, s := range b.spans.Ended() {
		if s.Name() != aggregator.SpanRecord {
			continue
		}
		records++
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("record span kind %v", s.SpanKind())
		}
		if s.Parent().SpanID() == root.SpanID() && s.SpanContext().TraceID() == root.TraceID() {
			child++
		}
	}
	if records != 25 || child != 1 {
		t.Fatalf("%d record spans (%d in the result's trace), want 25 (1)", records, child)
	}
}

func TestDuplicateResultCountedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, m := b.newDeps()
	b.admitted(t, "g", 2, 2)
	run(t, aggregator.Config{}, d, nil)

	b.publish(t, success("g", "j0", 1), "", nil)
	// The same job again under other message ids: a later attempt that
	// failed, and the same result re-published by a producer of its own.
	b.publish(t, failure("g", "j0", 2, "late"), "", nil)
	b.publish(t, success("g", "j0", 1), "republished-1", nil)
	testkit.WaitFor(t, "2 duplicates", waitTimeout, func() bool {
		return counterValue(m.RecordedResults.WithLabelValues(telemetry.StatusDuplicate)) == 2
	})
	if g := b.group(t, "g"); g.Done != 1 || g.Succeeded != 1 || g.Failed != 0 {
		t.Fatalf("after duplicates: %+v", g.GroupCounts)
	}
	b.publish(t, success("g", "j1", 1), "", nil)
	ev := b.waitEvent(t, "g", contracts.StateCompleted)
	if ev.Succeeded != 2 || ev.Failed != 0 || ev.Total != 2 {
		t.Fatalf("COMPLETED event = %+v", ev)
	}
	// A duplicate of a completed group re-publishes its event; the event's
	// message id keeps the stream at one COMPLETED event.
	b.publish(t, failure("g", "j1", 2, "late"), "", nil)
	testkit.WaitFor(t, "3 duplicates", waitTimeout, func() bool {
		return counterValue(m.RecordedResults.WithLabelValues(telemetry.StatusDuplicate)) == 3
	})
	b.waitSettled(t)
	completedOnceLast(t, b.events(t, "g"), 2)
	if g := b.group(t, "g"); g.Done != 2 || g.Succeeded != 2 || g.Failed != 0 {
		t.Fatalf("final counts %+v", g.GroupCounts)
	}
}

func TestCrashBeforeAckCountsOnce(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t)
	b.admitted(t, "g", 10, 10)
	for i := range 10 {
		b.publish(t, success("g", fmt.Sprintf("j%d", i), 1), "", nil)
	}
	cfg := aggregator.Config{AckWait: 500 * time.Millisecond}

	// The first aggregator records the results, then dies before it
	// publishes the event or acknowledges anything.
	var crashes atomic.Int32
	d1, m1 := b.newDeps()
	_, stop1 := run(t, cfg, d1, func(a *aggregator.Aggregator) {
		aggregator.SetAfterRecord(a, func() bool { crashes.Add(1); return true })
	})
	testkit.WaitFor(t, "the first aggregator to record", waitTimeout, func() bool { return crashes.Load() > 0 })
	stop1()
	if n := counterValue(m1.RecordedResults.WithLabelValues(telemetry.StatusSuccess)); n != 0 {
		t.Fatalf("the crashed aggregator counted %d results in its metrics", n)
	}
	if g := b.group(t, "g"); g.State != contracts.StateCompleted || g.Succeeded != 10 {
		t.Fatalf("after the crash: %+v, want recorded and COMPLETED", g.GroupCounts)
	}
	if evs := b.events(t, "g"); len(evs) != 0 {
		t.Fatalf("the crashed aggregator published %+v", evs)
	}
	if n := b.streamMsgs(t, b.names.StreamResult()); n != 10 {
		t.Fatalf("RESULT holds %d messages after the crash, want all 10 unacknowledged", n)
	}

	// The next aggregator gets them again once the ack wait is over: every
	// one is a duplicate, and the group's COMPLETED event is published.
	d2, m2 := b.newDeps()
	run(t, cfg, d2, nil)
	ev := b.waitEvent(t, "g", contracts.StateCompleted)
	if ev.Succeeded != 10 || ev.Failed != 0 || ev.Total != 10 {
		t.Fatalf("COMPLETED event = %+v", ev)
	}
	b.waitSettled(t)
	if n := counterValue(m2.RecordedResults.WithLabelValues(telemetry.StatusDuplicate)); n != 10 {
		t.Fatalf("redelivered results recorded as %d duplicates, want 10", n)
	}
	if g := b.group(t, "g"); g.Done != 10 || g.Succeeded != 10 {
		t.Fatalf("final counts %+v", g.GroupCounts)
	}
	if evs := b.events(t, "g"); len(evs) != 1 {
		t.Fatalf("%d events, want one COMPLETED", len(evs))
	}
}

// TestCrashBeforeEventPublishesCountsOnRedelivery: an aggregator records
// results of a group that is not complete and dies before publishing its
// event. The results come again to the next aggregator as duplicates; the
// group's counts must still reach EVENTS (its last event would otherwise
// stay without them until another result arrives).
func TestCrashBeforeEventPublishesCountsOnRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.admitted(t, "g", 10, 10)
	for i := range 6 {
		b.publish(t, success("g", fmt.Sprintf("j%d", i), 1), "", nil)
	}
	cfg := aggregator.Config{AckWait: 500 * time.Millisecond}
	d1, _ := b.newDeps()
	_, stop1 := run(t, cfg, d1, func(a *aggregator.Aggregator) {
		aggregator.SetAfterRecord(a, func() bool { return true })
	})
	testkit.WaitFor(t, "the first aggregator to record", waitTimeout, func() bool { return b.group(t, "g").Done == 6 })
	stop1()
	if evs := b.events(t, "g"); len(evs) != 0 {
		t.Fatalf("the crashed aggregator published %+v", evs)
	}

	d2, m2 := b.newDeps()
	run(t, cfg, d2, nil)
	testkit.WaitFor(t, "an event with the 6 results", waitTimeout, func() bool {
		evs := b.events(t, "g")
		return len(evs) > 0 && evs[len(evs)-1].Succeeded == 6
	})
	b.waitSettled(t)
	if n := counterValue(m2.RecordedResults.WithLabelValues(telemetry.StatusDuplicate)); n != 6 {
		t.Fatalf("redelivered results recorded as %d duplicates, want 6", n)
	}
	evs := b.events(t, "g")
	if last := evs[len(evs)-1]; last.State.Terminal() || last.Total != 10 || last.Jobs != 10 || last.Succeeded != 6 {
		t.Fatalf("last event %+v", last)
	}
}

func TestCompletionCleansUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "g", 3, 3)
	b.admitted(t, "other", 1, -1)
	keys := b.env.Keys
	// j2 fails once and goes through the backoff: the group gets congestion
	// state, and j2 comes back as attempt 2.
	if r, err := b.q.Retry(ctx, grp("g"), "j2", 1, 0, "flaky"); err != nil || r.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", r, err)
	}
	var rel *redisq.ReleaseResult
	testkit.WaitFor(t, "j2 released", waitTimeout, func() bool {
		var err error
		rel, err = b.q.Release(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(rel.Jobs) == 1
	})
	if err := b.q.Confirm(ctx, rel.Jobs...); err != nil {
		t.Fatal(err)
	}
	// (The non-ready counter went when j2's release brought it to 0.)
	if n, _ := b.rdb.Exists(ctx, keys.CongestionStats(grp("g"))).Result(); n != 1 {
		t.Fatalf("precondition: %s missing", keys.CongestionStats(grp("g")))
	}

	run(t, aggregator.Config{}, d, nil)
	b.publish(t, success("g", "j0", 1), "", nil)
	b.publish(t, failure("g", "j1", 1, "no"), "", nil)
	b.publish(t, success("g", "j2", rel.Jobs[0].Attempt), "", nil)
	b.waitEvent(t, "g", contracts.StateCompleted)

	// (Rate shares are per tenant: the tenant leaves the active set when it
	// stops asking for capacity, not when one of its groups completes.)
	if n, _ := b.rdb.Exists(ctx, keys.CongestionCount(grp("g"))).Result(); n != 0 {
		t.Errorf("%s still exists", keys.CongestionCount(grp("g")))
	}
	// The congestion statistics stay readable (the throttle count), with
	// the group's TTL.
	if n, _ := b.rdb.HGet(ctx, keys.CongestionStats(grp("g")), "currentNonReadyCount").Int64(); n != 0 {
		t.Errorf("ended group's stats say %d jobs back off", n)
	}
	ttl := func(k string) time.Duration {
		d, err := b.rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	jobTTL, groupTTL := b.q.Config().JobTTL, b.q.Config().GroupTTL
	for _, k := range []string{keys.GroupMeta(grp("g")), keys.CongestionStats(grp("g"))} {
		if d := ttl(k); d <= groupTTL-time.Minute || d > groupTTL {
			t.Errorf("%s TTL %s, want about %s", k, d, groupTTL)
		}
	}
	for _, jid := range []string{"j0", "j1", "j2"} {
		if d := ttl(keys.Job(grp("g"), jid)); d <= jobTTL-time.Minute || d > jobTTL {
			t.Errorf("job %s TTL %s, want about %s", jid, d, jobTTL)
		}
	}
	// The group still running keeps its state.
	if d := ttl(keys.GroupMeta(grp("other"))); d != -1 {
		t.Errorf("running group's meta has TTL %s", d)
	}
}

func TestRedisFailureHandsBatchBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "g", 3, 3)
	// Break j1's job hash so that recording it fails in Redis.
	key := b.env.Keys.Job(grp("g"), "j1")
	dump, err := b.rdb.Dump(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Set(ctx, key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.publish(t, success("g", fmt.Sprintf("j%d", i), 1), "", nil)
	}
	run(t, aggregator.Config{}, d, nil)

	// The batch fails and is handed back, and again on its redelivery: no
	// result leaves RESULT while its batch is not recorded.
	testkit.WaitFor(t, "a redelivery", waitTimeout, func() bool {
		cons, err := b.js.Consumer(ctx, b.names.StreamResult(), aggregator.DefaultDurable)
		if err != nil {
			return false // not created yet
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Delivered.Consumer > 3
	})
	// A result fetched in a batch of its own (before the others arrived) is
	// rightly recorded and acknowledged, and results of the failed batch may
	// be recorded already (their redelivery is a harmless duplicate); but a
	// result may leave RESULT only once recorded, and j1's must still be there.
	n := b.streamMsgs(t, b.names.StreamResult())
	g := b.group(t, "g")
	if n < 1 || int64(n)+g.Done < 3 {
		t.Fatalf("RESULT holds %d messages and %d are recorded while recording fails: a result left RESULT unrecorded", n, g.Done)
	}
	if g.State == contracts.StateCompleted || g.Done > 2 {
		t.Fatalf("group %+v while j1 cannot be recorded", g.GroupCounts)
	}
	// A result recorded in a batch of its own may have its progress event;
	// nothing of the failed batch is in any event.
	for _, ev := range b.events(t, "g") {
		if ev.State.Terminal() || ev.Succeeded > g.Done {
			t.Fatalf("event %+v counts results of a batch that failed (%d recorded)", ev, g.Done)
		}
	}

	if err := b.rdb.RestoreReplace(ctx, key, 0, dump).Err(); err != nil {
		t.Fatal(err)
	}
	ev := b.waitEvent(t, "g", contracts.StateCompleted)
	if ev.Succeeded != 3 || ev.Failed != 0 {
		t.Fatalf("COMPLETED event = %+v", ev)
	}
	b.waitSettled(t)
	if g := b.group(t, "g"); g.Done != 3 || g.Succeeded != 3 {
		t.Fatalf("final counts %+v", g.GroupCounts)
	}
}

// TestInvalidResultsAreDeadLettered: a RESULT message that is not a valid
// v2 batch of its subject's group is dead-lettered with its reason, and none
// of its results is recorded (a message is accepted or rejected whole).
func TestInvalidResultsAreDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, m := b.newDeps()
	b.admitted(t, "g", 2, -1)
	run(t, aggregator.Config{}, d, nil)

	batch := func(rs ...contracts.JobResult) []byte {
		data, err := json.Marshal(contracts.ResultBatch{V: contracts.Version, Results: rs})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	ok := contracts.JobResult{JobID: "j0", Attempt: 1, Status: contracts.ResultSuccess}
	otherGroup, otherTenant, badStatus := ok, ok, ok
	otherGroup.GroupID = "other"
	otherTenant.JobID, otherTenant.Tenant, otherTenant.GroupID = "j1", "intruder", "g"
	badStatus.JobID, badStatus.Status = "j1", "MAYBE"
	cases := []struct {
		body   []byte
		reason string
		field  string // named in the dead letter's error, "" = not checked
	}{
		{[]byte("{not json"), contracts.ReasonBadJSON, ""},
		{[]byte(`{"v":1,"groupId":"g","jobId":"j0","attempt":1,"status":"SUCCESS","durationMs":1}`), contracts.ReasonBadVersion, ""},
		{batch(otherGroup), contracts.ReasonSubjectMismatch, "results[0].groupId"},
		{batch(ok, otherTenant), contracts.ReasonSubjectMismatch, "results[1].tenant"},
		{batch(ok, badStatus), contracts.ReasonInvalidField, "results[1].status"},
	}
	for _, tc := range cases {
		if _, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: b.names.Result(grp("g")), Data: tc.body}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "dead letters", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamDLQ()) == uint64(len(cases)) })
	b.waitSettled(t)
	got := map[string]contracts.DeadLetter{} // by body
	for _, msg := range b.env.StoredMsgs(t, b.names.StreamDLQ()) {
		var dl contracts.DeadLetter
		if err := json.Unmarshal(msg.Data, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Subject != b.names.Result(grp("g")) || msg.Subject != b.names.DLQOf(dl.Subject, dl.Reason) {
			t.Fatalf("dead letter %+v on %s", dl, msg.Subject)
		}
		body := dl.Raw
		if dl.Message != nil {
			body = string(dl.Message)
		}
		got[body] = dl
	}
	for _, tc := range cases {
		dl, found := got[string(tc.body)]
		if !found {
			t.Errorf("no dead letter of %s", tc.body)
			continue
		}
		if dl.Reason != tc.reason || !strings.Contains(dl.Error, tc.field) {
			t.Errorf("dead letter of %s: reason %q error %q, want %q naming %q", tc.body, dl.Reason, dl.Error, tc.reason, tc.field)
		}
	}
	if n := counterValue(m.DeadLetters.WithLabelValues(contracts.ReasonSubjectMismatch)); n != 2 {
		t.Fatalf("dead_letter_total{subject_mismatch} = %d, want 2", n)
	}
	if g := b.group(t, "g"); g.Done != 0 {
		t.Fatalf("g = %+v: a result of a rejected message was recorded", g.GroupCounts)
	}
	if n := counterValue(m.RecordedResults.WithLabelValues(telemetry.StatusSuccess)); n != 0 {
		t.Fatalf("recorded_results{SUCCESS} = %d, want 0", n)
	}
	if evs := b.events(t, "g"); len(evs) != 0 {
		t.Fatalf("events for rejected results: %+v", evs)
	}
}

func TestUnknownJobIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, m := b.newDeps()
	run(t, aggregator.Config{}, d, nil)
	b.publish(t, success("ghost", "j9", 1), "", nil)
	b.waitSettled(t)
	testkit.WaitFor(t, "the drop counted", waitTimeout, func() bool {
		return counterValue(m.RecordedResults.WithLabelValues(telemetry.StatusDropped)) == 1
	})
	if recs := b.logs.find(slog.LevelWarn, "result of an unknown job dropped", "job", "j9"); len(recs) != 1 || recs[0].Attrs["group"] != "ghost" {
		t.Fatalf("warn lines %+v", recs)
	}
	if n := counterValue(m.RecordedResults.WithLabelValues(telemetry.StatusSuccess)); n != 0 {
		t.Fatalf("unknown job counted as recorded")
	}
}

func TestStuckGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "slow", 3, 3) // AGGREGATING: its jobs are all out
	b.admitted(t, "done", 1, 1)
	if _, err := b.q.EnqueueJobs(ctx, []redisq.Job{{Group: grp("waiting"), ID: "j", Type: "t"}}); err != nil {
		t.Fatal(err) // CREATED: never started, not stuck
	}
	const stuckAfter = 400 * time.Millisecond
	a, _ := run(t, aggregator.Config{StuckAfter: stuckAfter, StuckCheckEvery: 20 * time.Millisecond}, d, nil)
	b.publish(t, success("slow", "j0", 1), "", nil)
	b.publish(t, success("done", "j0", 1), "", nil)
	b.waitEvent(t, "done", contracts.StateCompleted)
	// Waiting for its last results, "slow" asks for no capacity and leaves
	// the rate limiter's active set; the stuck check must still see it.
	testkit.WaitFor(t, "slow recorded", waitTimeout, func() bool { return b.group(t, "slow").Done == 1 })
	// (Rate shares are per tenant: take the tenant out, as if none of its
	// groups asked for capacity any more.)
	if err := b.rdb.SRem(ctx, b.env.Keys.ActiveTenants(), tenant).Err(); err != nil {
		t.Fatal(err)
	}

	var stuck []redisq.GroupInfo
	testkit.WaitFor(t, "slow reported stuck", waitTimeout, func() bool {
		var err error
		if stuck, err = a.Stuck(ctx); err != nil {
			t.Fatal(err)
		}
		return len(stuck) > 0
	})
	if len(stuck) != 1 || stuck[0].Group != grp("slow") || stuck[0].State != contracts.StateAggregating || stuck[0].Done != 1 {
		t.Fatalf("Stuck = %+v, want only slow", stuck)
	}
	if age := time.Since(time.UnixMilli(stuck[0].LastProgressAtMs)); age < stuckAfter {
		t.Fatalf("reported after %s without progress, want at least %s", age, stuckAfter)
	}

	// The watcher warns about it once per StuckAfter, though it checks every 20 ms.
	var warns []logRecord
	testkit.WaitFor(t, "two stuck warnings", waitTimeout, func() bool {
		warns = b.logs.find(slog.LevelWarn, "group stuck: no progress", "group", "slow")
		return len(warns) >= 2
	})
	// (A record's time is taken when it is logged, a moment after the
	// watcher's own clock reading: the gap may fall short of StuckAfter by
	// that moment, never by a check interval.)
	if gap := warns[1].At.Sub(warns[0].At); gap < stuckAfter-20*time.Millisecond {
		t.Fatalf("stuck warnings %s apart, want about %s", gap, stuckAfter)
	}
	if others := b.logs.find(slog.LevelWarn, "group stuck: no progress", "", ""); len(others) != len(b.logs.find(slog.LevelWarn, "group stuck: no progress", "group", "slow")) {
		t.Fatalf("stuck warnings for other groups: %+v", others)
	}

	// Progress clears it.
	b.publish(t, success("slow", "j1", 1), "", nil)
	testkit.WaitFor(t, "slow no longer stuck", waitTimeout, func() bool {
		s, err := a.Stuck(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(s) == 0
	})
}
