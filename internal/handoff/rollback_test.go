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

// snapshot is a copy of every key under the queue's prefix (DUMP), to
// stand in for the state a Redis replica had before it lost the writes
// that followed (an asynchronous failover, AOF everysec).
type snapshot map[string]string

func takeSnapshot(t *testing.T, e *pipelinetest.Env) snapshot {
	t.Helper()
	ctx := context.Background()
	keys, err := e.Redis.Keys(ctx, e.Keys.Prefix()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{}
	for _, k := range keys {
		d, err := e.Redis.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		s[k] = d
	}
	return s
}

// rollBack makes the queue's keys what they were at s: the writes since are lost.
func rollBack(t *testing.T, e *pipelinetest.Env, s snapshot) {
	t.Helper()
	ctx := context.Background()
	keys, err := e.Redis.Keys(ctx, e.Keys.Prefix()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := e.Redis.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k, d := range s {
		if err := e.Redis.RestoreReplace(ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// consumeReady takes READY's messages, n jobs in all, as a worker does: it
// claims their jobs in Redis, then acknowledges each message.
func consumeReady(t *testing.T, e *pipelinetest.Env, n int) {
	t.Helper()
	ctx := context.Background()
	cons, err := e.JS.CreateOrUpdateConsumer(ctx, e.Names.StreamReady(), jetstream.ConsumerConfig{
		Durable: "rollback-worker", FilterSubject: e.Names.ReadyAll(), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		rb, err := contracts.DecodeReadyBatch(m.Data(), contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range rb.Jobs {
			if out, err := e.Queue.Claim(ctx, j.Ref(), j.JobID, j.Attempt); err != nil || out != redisq.ClaimRun {
				t.Fatalf("claim %s attempt %d: %s %v", j.JobID, j.Attempt, out, err)
			}
			got++
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got != n {
		t.Fatalf("consumed %d jobs from READY, want %d", got, n)
	}
}

func rollbackJobs(n int) []redisq.Job {
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: contracts.Group(tenant, "rb"), ID: fmt.Sprintf("j%d", i), Type: "mail"}
	}
	return jobs
}

// TestReadmissionAfterRollbackIsPublished reproduces a hand-out Redis lost:
// jobs were leased as attempt 1, published, confirmed, and their READY
// messages consumed (claimed and acknowledged by a worker); then Redis
// rolled back to before the admission, so the jobs are queued again with
// attempt 0. Admitting them again leases attempt 1 again: the same jobs
// make the same pack, whose message id is a JetStream duplicate (within the
// duplicate window) of a message no longer on READY. The hand-off must not take that PubAck as a publish —
// the jobs would stay leased with no READY message, forever — but lease
// them as attempt 2 and publish that.
func TestReadmissionAfterRollbackIsPublished(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	const n = 5
	if _, err := e.Queue.EnqueueJobs(ctx, rollbackJobs(n)); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, e)

	res, err := e.Queue.Admit(ctx, n)
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("admit: %+v %v", res, err)
	}
	if ok, err := publish(ctx, e.Deps(), res.Jobs, pack, handoff.SpanAdmit); err != nil || len(ok) != n {
		t.Fatalf("publish: %d %v", len(ok), err)
	}
	consumeReady(t, e, n)

	rollBack(t, e, before)
	res, err = e.Queue.Admit(ctx, n)
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("admit after the rollback: %+v %v", res, err)
	}
	for _, j := range res.Jobs {
		if j.Attempt != 1 {
			t.Fatalf("%s re-admitted as attempt %d, want 1 (the lost one again)", j.ID, j.Attempt)
		}
	}
	ok, err := publish(ctx, e.Deps(), res.Jobs, pack, handoff.SpanAdmit)
	if err != nil || len(ok) != n {
		t.Fatalf("publish after the rollback: %d %v", len(ok), err)
	}
	msgs := stored(t, e)
	if len(msgs) != 1 {
		t.Fatalf("READY holds %d messages after the re-admission, want 1 (the %d jobs' pack)", len(msgs), n)
	}
	for _, m := range msgs {
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rb.Jobs) != n || m.Header.Get(jetstream.MsgIDHeader) != rb.MsgID() {
			t.Errorf("pack of %d jobs, id %s, want %d jobs and id %s", len(rb.Jobs), m.Header.Get(jetstream.MsgIDHeader), n, rb.MsgID())
		}
		for _, j := range rb.Jobs {
			if j.Attempt != 2 {
				t.Errorf("%s: attempt %d, want attempt 2", j.JobID, j.Attempt)
			}
			// the job is leased as the attempt its message carries, and runs
			if out, err := e.Queue.Claim(ctx, j.Ref(), j.JobID, j.Attempt); err != nil || out != redisq.ClaimRun {
				t.Errorf("claim %s attempt %d: %s %v", j.JobID, j.Attempt, out, err)
			}
		}
	}
	for _, j := range ok {
		if j.Attempt != 2 {
			t.Errorf("%s confirmed as attempt %d, want 2", j.ID, j.Attempt)
		}
	}
	if got := e.Inflight(t); got != 0 {
		t.Errorf("%d leases left unconfirmed", got)
	}
	// the lost attempt's result, arriving late, is fenced; attempt 2's counts
	late, err := e.Queue.Record(ctx, contracts.JobResult{Tenant: tenant, GroupID: "rb", JobID: "j0", Attempt: 1, Status: contracts.ResultSuccess})
	if err != nil || late.Outcome != redisq.FencedResult {
		t.Errorf("attempt 1's result: %+v %v, want fenced", late, err)
	}
	rec, err := e.Queue.Record(ctx, contracts.JobResult{Tenant: tenant, GroupID: "rb", JobID: "j0", Attempt: 2, Status: contracts.ResultSuccess})
	if err != nil || rec.Outcome != redisq.Recorded || rec.Group.Done != 1 {
		t.Errorf("attempt 2's result: %+v %v", rec, err)
	}
}

// TestReadmissionAfterRollbackKeepsUnconsumedMessage: after the same
// rollback, but with the first messages still on READY (no worker took
// them yet), the duplicate PubAck is a publish: the stored message carries
// the attempt the job is leased as again, and no second message is added.
func TestReadmissionAfterRollbackKeepsUnconsumedMessage(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	const n = 4
	if _, err := e.Queue.EnqueueJobs(ctx, rollbackJobs(n)); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, e)
	res, err := e.Queue.Admit(ctx, n)
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("admit: %+v %v", res, err)
	}
	if ok, err := publish(ctx, e.Deps(), res.Jobs, pack, handoff.SpanAdmit); err != nil || len(ok) != n {
		t.Fatalf("publish: %d %v", len(ok), err)
	}
	rollBack(t, e, before)
	res, err = e.Queue.Admit(ctx, n)
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("admit after the rollback: %+v %v", res, err)
	}
	ok, err := publish(ctx, e.Deps(), res.Jobs, pack, handoff.SpanAdmit)
	if err != nil || len(ok) != n {
		t.Fatalf("publish after the rollback: %d %v", len(ok), err)
	}
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != 1 {
		t.Fatalf("READY holds %d messages, want 1 (the pack of %d jobs)", got, n)
	}
	consumeReady(t, e, n) // each claims attempt 1, which runs
	if got := e.Inflight(t); got != 0 {
		t.Errorf("%d leases left unconfirmed", got)
	}
}
