package handoff_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// In packs of one each job is a READY message of its own, with the job's
// message id.
func TestPublishPacksOfOne(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	jobs := lease(t, e, []string{"a"}, 5, "")
	ok, err := publish(context.Background(), e.Deps(), jobs, 1, handoff.SpanAdmit)
	if err != nil || len(ok) != len(jobs) {
		t.Fatalf("publish: %d confirmed, %v", len(ok), err)
	}
	msgs := stored(t, e)
	if len(msgs) != len(jobs) {
		t.Fatalf("READY holds %d messages, want one per job (%d)", len(msgs), len(jobs))
	}
	for i, m := range msgs {
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil || len(rb.Jobs) != 1 {
			t.Fatalf("message %d: %d jobs, %v; want 1", i, len(rb.Jobs), err)
		}
		j := rb.Jobs[0]
		if got, want := m.Header.Get(jetstream.MsgIDHeader), contracts.ReadyMsgID(j.Ref(), j.JobID, j.Attempt); got != want {
			t.Errorf("message %d: Nats-Msg-Id %q, want %q", i, got, want)
		}
		if m.Header.Get(handoff.HeaderJobTraceparent) != "" {
			t.Errorf("message %d carries job traceparents", i)
		}
	}
}

// takeOne takes the oldest READY message of typ off READY (acknowledged, as
// a worker does once its jobs are settled) and returns its jobs.
func takeOne(t *testing.T, e *pipelinetest.Env, typ string) int {
	t.Helper()
	ctx := context.Background()
	cons, err := e.JS.CreateOrUpdateConsumer(ctx, e.Names.StreamReady(), jetstream.ConsumerConfig{
		Durable: "room-" + typ, FilterSubjects: e.Names.ReadyFilters(typ), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		rb, err := contracts.DecodeReadyBatch(m.Data(), contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		n += len(rb.Jobs)
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatalf("no READY message of %s", typ)
	}
	return n
}

// The room counts jobs exactly, whatever the packs: a pack counts as its
// jobs while on READY (its subject names how many), and once consumed it no
// longer weighs on the room (full packs before do not make later small
// ones count as full: the weakness of an average pack size). Any process
// measures the same.
func TestRoomCountsJobsOfPacks(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	const capacity = 100
	room := handoff.NewRoom(e.Deps(), capacity)
	want := func(what string, byType map[string]int) {
		t.Helper()
		rs, err := room.Measure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for typ, jobs := range byType {
			got, ok := rs.ByType[typ]
			if !ok {
				got = rs.Capacity // no message of typ on READY
			}
			if got != capacity-jobs {
				t.Fatalf("%s: room of %s %d, want %d (%d jobs on READY)", what, typ, got, capacity-jobs, jobs)
			}
		}
	}
	publish := func(group string, from, n, per int) {
		t.Helper()
		var jobs []redisq.Job
		for i := from; i < from+n; i++ {
			jobs = append(jobs, redisq.Job{Group: contracts.Group(tenant, group), ID: fmt.Sprintf("j%03d", i), Type: "type-" + group})
		}
		if ok, err := publish(ctx, e.Deps(), e.Lease(t, jobs), per, handoff.SpanAdmit); err != nil || len(ok) != n {
			t.Fatalf("publish: %d confirmed, %v", len(ok), err)
		}
	}

	publish("a", 0, 20, pack) // packs of 7, 7, 6
	publish("b", 0, 3, 1)     // one message per job
	want("packs published", map[string]int{"type-a": 20, "type-b": 3})
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != 3+3 {
		t.Fatalf("READY holds %d messages, want 6", got)
	}
	left := 20 - takeOne(t, e, "type-a")
	want("a pack consumed", map[string]int{"type-a": left, "type-b": 3})
	left -= takeOne(t, e, "type-a")
	left -= takeOne(t, e, "type-a")
	want("every pack consumed", map[string]int{"type-a": 0, "type-b": 3})

	// Later small packs count as what they carry.
	publish("a", 100, 3, 1)
	publish("a", 200, 2, pack)
	want("small packs after full ones", map[string]int{"type-a": 5, "type-b": 3})
	// Another room of the same process counts the same.
	other := handoff.NewRoom(e.Deps(), capacity)
	if rs, err := other.Measure(ctx); err != nil || rs.ByType["type-a"] != capacity-5 {
		t.Fatalf("another room: %+v %v, want type-a %d", rs, err, capacity-5)
	}
}

// A measurement reused by Recent only understates the room: an admission
// against it takes off every job handed to READY since (the earlier rounds'
// own included), and it is not reused once older than its age limit or
// after a failed measurement.
func TestRecentRoomOnlyUnderstates(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	const capacity = 6
	room := handoff.NewRoom(e.Deps(), capacity)
	if _, ok := room.Recent(time.Minute); ok {
		t.Fatal("Recent before any measurement")
	}
	var jobs []redisq.Job
	for i := range 10 {
		jobs = append(jobs, redisq.Job{Group: contracts.Group(tenant, "r"), ID: fmt.Sprintf("j%03d", i), Type: "type-r"})
	}
	if _, err := e.Queue.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	admit := func(rs handoff.Rooms, n int) []redisq.LeasedJob {
		t.Helper()
		res, err := e.Queue.Admit(ctx, n, redisq.WithTypeRooms(rs.ByType, rs.Capacity), redisq.WithReadySeq(rs.Seq))
		if err != nil {
			t.Fatal(err)
		}
		return res.Jobs
	}
	m, err := room.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := admit(m, 3)
	if ok, err := publish(ctx, e.Deps(), first, 1, handoff.SpanAdmit); err != nil || len(ok) != 3 {
		t.Fatalf("publish: %d confirmed, %v", len(ok), err)
	}
	again, ok := room.Recent(time.Minute)
	if !ok || again.Seq != m.Seq {
		t.Fatalf("Recent: %+v %v, want the measurement at sequence %d", again, ok, m.Seq)
	}
	// The reused rooms still say 6 free; the 3 published since are taken off.
	if got := len(admit(again, 10)); got != capacity-3 {
		t.Fatalf("admitted %d jobs against the reused measurement, want %d", got, capacity-3)
	}
	if got := e.ReadyJobs(t); got != 3 {
		t.Fatalf("READY holds %d jobs, want 3 (the rest are leased, not published)", got)
	}
	time.Sleep(20 * time.Millisecond)
	if _, ok := room.Recent(10 * time.Millisecond); ok {
		t.Fatal("Recent returned a measurement older than its age limit")
	}
	// A failed measurement leaves nothing to reuse.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := room.Measure(cctx); err == nil {
		t.Fatal("Measure with a cancelled context succeeded")
	}
	if _, ok := room.Recent(time.Minute); ok {
		t.Fatal("Recent after a failed measurement")
	}
}
