package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
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
		StuckCheckEvery: 30 * time.Second, AckWait: 30 * time.Second}
	if got := a.Config(); got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
}

func TestExactCounts(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t)
	d, m := b.newDeps()
	b.admitted(t, "g", 20, 20)
	b.admitted(t, "open", 5, -1) // not sealed: it cannot complete

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
	if evs := b.events(t, "g"); len(evs) != 1 {
		t.Fatalf("%d events for g, want the one COMPLETED: %+v", len(evs), evs)
	}
	if evs := b.events(t, "open"); len(evs) != 0 {
		t.Fatalf("events for the unsealed group: %+v", evs)
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
	if evs := b.events(t, "g"); len(evs) != 1 {
		t.Fatalf("%d events, want one COMPLETED: %+v", len(evs), evs)
	}
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

func TestCompletionCleansUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "g", 3, 3)
	b.admitted(t, "other", 1, -1)
	keys := b.q.Keys()
	// j2 fails once and goes through the backoff: the group gets congestion
	// state, and j2 comes back as attempt 2.
	if r, err := b.q.Retry(ctx, "g", "j2", 1, 0, "flaky"); err != nil || r.Outcome != "parked" {
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
	if n, _ := b.rdb.Exists(ctx, keys.CongestionStats("g")).Result(); n != 1 {
		t.Fatalf("precondition: %s missing", keys.CongestionStats("g"))
	}
	if ok, _ := b.rdb.SIsMember(ctx, keys.ActiveGroups(), "g").Result(); !ok {
		t.Fatal("precondition: g not in the active set")
	}

	run(t, aggregator.Config{}, d, nil)
	b.publish(t, success("g", "j0", 1), "", nil)
	b.publish(t, failure("g", "j1", 1, "no"), "", nil)
	b.publish(t, success("g", "j2", rel.Jobs[0].Attempt), "", nil)
	b.waitEvent(t, "g", contracts.StateCompleted)

	if ok, _ := b.rdb.SIsMember(ctx, keys.ActiveGroups(), "g").Result(); ok {
		t.Error("completed group still in the active set")
	}
	if _, err := b.rdb.ZScore(ctx, keys.ActiveSeen(), "g").Result(); err == nil {
		t.Error("completed group still in the active set's last-seen index")
	}
	for _, k := range []string{keys.CongestionCount("g"), keys.CongestionStats("g")} {
		if n, _ := b.rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s still exists", k)
		}
	}
	ttl := func(k string) time.Duration {
		d, err := b.rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	jobTTL, groupTTL := b.q.Config().JobTTL, b.q.Config().GroupTTL
	if d := ttl(keys.GroupMeta("g")); d <= groupTTL-time.Minute || d > groupTTL {
		t.Errorf("meta TTL %s, want about %s", d, groupTTL)
	}
	for _, jid := range []string{"j0", "j1", "j2"} {
		if d := ttl(keys.Job("g", jid)); d <= jobTTL-time.Minute || d > jobTTL {
			t.Errorf("job %s TTL %s, want about %s", jid, d, jobTTL)
		}
	}
	// The group still running keeps its state.
	if ok, _ := b.rdb.SIsMember(ctx, keys.ActiveGroups(), "other").Result(); !ok {
		t.Error("the running group left the active set")
	}
	if d := ttl(keys.GroupMeta("other")); d != -1 {
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
	key := b.q.Keys().Job("g", "j1")
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
	if len(b.events(t, "g")) != 0 {
		t.Fatal("event published for a batch that failed")
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

func TestInvalidResultsAreDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, m := b.newDeps()
	run(t, aggregator.Config{}, d, nil)

	mismatch, _ := json.Marshal(contracts.JobResult{V: 1, GroupID: "other", JobID: "j", Attempt: 1, Status: contracts.ResultSuccess})
	badStatus, _ := json.Marshal(contracts.JobResult{V: 1, GroupID: "g", JobID: "j", Attempt: 1, Status: "MAYBE"})
	for _, body := range [][]byte{[]byte("{not json"), mismatch, badStatus} {
		if _, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: b.names.Result("g"), Data: body}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "3 dead letters", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamDLQ()) == 3 })
	b.waitSettled(t)
	st, err := b.js.Stream(ctx, b.names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for seq := uint64(1); seq <= 3; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var dl contracts.DeadLetter
		if err := json.Unmarshal(msg.Data, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Subject != b.names.Result("g") || msg.Subject != b.names.DLQ(dl.Reason) {
			t.Fatalf("dead letter %+v on %s", dl, msg.Subject)
		}
		reasons = append(reasons, dl.Reason)
	}
	slices.Sort(reasons)
	if want := []string{contracts.ReasonBadJSON, contracts.ReasonInvalidField, contracts.ReasonSubjectMismatch}; !slices.Equal(reasons, want) {
		t.Fatalf("reasons %v, want %v", reasons, want)
	}
	if n := counterValue(m.DeadLetters.WithLabelValues(contracts.ReasonSubjectMismatch)); n != 1 {
		t.Fatalf("dead_letter_total{subject_mismatch} = %d", n)
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
	if _, err := b.q.EnqueueJobs(ctx, []redisq.Job{{GroupID: "waiting", ID: "j", Type: "t"}}); err != nil {
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
	if err := b.rdb.SRem(ctx, b.q.Keys().ActiveGroups(), "slow").Err(); err != nil {
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
	if len(stuck) != 1 || stuck[0].ID != "slow" || stuck[0].State != contracts.StateAggregating || stuck[0].Done != 1 {
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
	if gap := warns[1].At.Sub(warns[0].At); gap < stuckAfter {
		t.Fatalf("stuck warnings %s apart, want at least %s", gap, stuckAfter)
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
