package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// result is a result of job jid of group gid for attempt.
func result(gid, jid string, attempt int, status contracts.ResultStatus) contracts.JobResult {
	return contracts.JobResult{Tenant: testTenant, GroupID: gid, JobID: jid, Attempt: attempt, Status: status}
}

// recordOne records r and checks its outcome.
func recordOne(t *testing.T, q *redisq.Queue, r contracts.JobResult, want redisq.RecordOutcome) *redisq.RecordResult {
	t.Helper()
	got, err := q.Record(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != want {
		t.Fatalf("result %s attempt %d: %s, want %s", r.JobID, r.Attempt, got.Outcome, want)
	}
	return got
}

// jobState reads a job's status and attempt (a job without the field
// attempt, a queued job's record included, has attempt 0).
func jobState(t *testing.T, q *redisq.Queue, b *testBundle, gid, jid string) (string, string) {
	t.Helper()
	h, err := redisq.ReadJob(context.Background(), b.rdb, q.Keys(), G(gid), jid)
	if err != nil {
		t.Fatal(err)
	}
	s := h["status"]
	a, ok := h["attempt"]
	if !ok && s != "" {
		a = "0"
	}
	return s, a
}

// checkCounts checks a group's stored counters.
func checkCounts(t *testing.T, q *redisq.Queue, gid string, state contracts.GroupState, done, succeeded, failed int64) {
	t.Helper()
	info, ok, err := q.Group(context.Background(), G(gid))
	if err != nil || !ok {
		t.Fatalf("group %s: %v %v", gid, ok, err)
	}
	if info.Done != done || info.Succeeded != succeeded || info.Failed != failed || (state != "" && info.State != state) {
		t.Fatalf("group %s: %s done %d succeeded %d failed %d, want %s %d %d %d", gid, info.State, info.Done,
			info.Succeeded, info.Failed, state, done, succeeded, failed)
	}
}

// TestRecordFencesResultOfQueuedJob: a result for a job that is still
// queued (Redis lost the writes that leased and claimed it, or the result
// is forged) changes nothing; the job is admitted, runs and is counted once
// by its own result.
func TestRecordFencesResultOfQueuedJob(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
	enqueueN(t, q, "A", 2, "", 0)
	seal(t, q, "A", 2)
	for _, a := range []int{0, 1, 2} { // whatever attempt it claims
		recordOne(t, q, result("A", "j00000", a, contracts.ResultSuccess), redisq.FencedResult)
		recordOne(t, q, result("A", "j00001", a, contracts.ResultFailed), redisq.FencedResult)
	}
	checkCounts(t, q, "A", contracts.StateCreated, 0, 0, 0)
	if st, a := jobState(t, q, b, "A", "j00000"); st != "QUEUED" || a != "0" {
		t.Fatalf("fenced result changed the job: %s attempt %s", st, a)
	}
	if n, _ := q.PendingJobs(ctx, G("A")); n != 2 {
		t.Fatalf("%d jobs queued after fenced results, want 2", n)
	}
	if n, _ := q.FailuresKept(ctx, G("A")); n != 0 {
		t.Fatalf("a fenced FAILED result is listed as a failure (%d)", n)
	}
	// the jobs run and are counted once each
	r, err := q.Admit(ctx, 2)
	if err != nil || len(r.Jobs) != 2 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	for _, j := range r.Jobs {
		if out, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || out != redisq.ClaimRun {
			t.Fatalf("claim %s: %s %v", j.ID, out, err)
		}
	}
	recordOne(t, q, result("A", "j00000", 1, contracts.ResultSuccess), redisq.Recorded)
	rec := recordOne(t, q, result("A", "j00001", 1, contracts.ResultSuccess), redisq.Recorded)
	if !rec.Completed {
		t.Fatalf("the last result did not complete the group: %+v", rec)
	}
	checkCounts(t, q, "A", contracts.StateCompleted, 2, 2, 0)
}

// TestRecordFencesEarlierAttempt: a result for attempt 1 while the job runs
// attempt 2 (a retry replaced it) is fenced, and so is one that arrives
// while the job backs off; attempt 2's result counts.
func TestRecordFencesEarlierAttempt(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, BaseBackoff: time.Second, MaxBackoff: time.Second}, true)
	enqueueN(t, q, "A", 1, "", 0)
	seal(t, q, "A", 1)
	r, err := q.Admit(ctx, 1)
	if err != nil || len(r.Jobs) != 1 || r.Jobs[0].Attempt != 1 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	if out, _ := q.Claim(ctx, G("A"), "j00000", 1); out != redisq.ClaimRun {
		t.Fatalf("claim 1: %s", out)
	}
	if rr, err := q.Retry(ctx, G("A"), "j00000", 1, -1, "503"); err != nil || rr.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", rr, err)
	}
	// attempt 1 ran twice (a redelivery); the other run's result comes late
	recordOne(t, q, result("A", "j00000", 1, contracts.ResultSuccess), redisq.FencedResult)
	if st, _ := jobState(t, q, b, "A", "j00000"); st != "BACKOFF" {
		t.Fatalf("job %s after a fenced result, want BACKOFF", st)
	}
	b.clock.advance(2 * time.Second)
	rel, err := q.Release(ctx, 10)
	if err != nil || len(rel.Jobs) != 1 || rel.Jobs[0].Attempt != 2 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	recordOne(t, q, result("A", "j00000", 1, contracts.ResultSuccess), redisq.FencedResult) // leased as 2
	if out, _ := q.Claim(ctx, G("A"), "j00000", 2); out != redisq.ClaimRun {
		t.Fatalf("claim 2: %s", out)
	}
	recordOne(t, q, result("A", "j00000", 1, contracts.ResultFailed), redisq.FencedResult) // running as 2
	recordOne(t, q, result("A", "j00000", 3, contracts.ResultFailed), redisq.FencedResult) // not yet
	checkCounts(t, q, "A", contracts.StateAggregating, 0, 0, 0)
	rec := recordOne(t, q, result("A", "j00000", 2, contracts.ResultSuccess), redisq.Recorded)
	if !rec.Completed {
		t.Fatalf("attempt 2's result did not complete the group: %+v", rec)
	}
	// once terminal, any result is a duplicate
	recordOne(t, q, result("A", "j00000", 1, contracts.ResultFailed), redisq.DuplicateResult)
	checkCounts(t, q, "A", contracts.StateCompleted, 1, 1, 0)
}

// TestRecordFencesForgedResults: results published on a result subject for
// jobs that never ran (queued), for attempts never handed out, and for jobs
// that do not exist, in one batch with legitimate ones: only the legitimate
// ones count, and the group's counts stay exact.
func TestRecordFencesForgedResults(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
	enqueueN(t, q, "A", 6, "", 0)
	seal(t, q, "A", 6)
	r, err := q.Admit(ctx, 3) // j00000..j00002 leased as attempt 1
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	for _, j := range r.Jobs[:2] {
		if out, _ := q.Claim(ctx, j.Group, j.ID, j.Attempt); out != redisq.ClaimRun {
			t.Fatalf("claim %s: %s", j.ID, out)
		}
	}
	S, F := contracts.ResultSuccess, contracts.ResultFailed
	rs := []contracts.JobResult{
		result("A", "j00003", 1, S), // queued: never ran
		result("A", "j00000", 1, S), // running: counts
		result("A", "j00001", 2, F), // running attempt 1: forged attempt
		result("A", "j00004", 0, F), // queued, attempt 0
		result("A", "j00002", 1, F), // leased (not yet claimed): counts
		result("A", "nope", 1, S),   // no such job
		result("A", "j00005", 1, S), // queued
		result("A", "j00001", 1, S), // running: counts
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := []redisq.RecordOutcome{redisq.FencedResult, redisq.Recorded, redisq.FencedResult, redisq.FencedResult,
		redisq.Recorded, redisq.UnknownJob, redisq.FencedResult, redisq.Recorded}
	for i, w := range wantOut {
		if got[i].Outcome != w {
			t.Errorf("result %d (%s attempt %d): %s, want %s", i, rs[i].JobID, rs[i].Attempt, got[i].Outcome, w)
		}
	}
	checkCounts(t, q, "A", "", 3, 2, 1)
	if n, _ := q.PendingJobs(ctx, G("A")); n != 3 {
		t.Fatalf("%d jobs queued, want 3 (the forged results took none)", n)
	}
	// The rest run and are counted: the group completes with exact counts.
	r, err = q.Admit(ctx, 3)
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	var last *redisq.RecordResult
	for _, j := range r.Jobs {
		if out, _ := q.Claim(ctx, j.Group, j.ID, j.Attempt); out != redisq.ClaimRun {
			t.Fatalf("claim %s: %s", j.ID, out)
		}
		last = recordOne(t, q, result("A", j.ID, j.Attempt, S), redisq.Recorded)
	}
	if !last.Completed {
		t.Fatalf("group not completed: %+v", last)
	}
	checkCounts(t, q, "A", contracts.StateCompleted, 6, 5, 1)
}

// TestRecordKeepsLegitimateFlows: every flow that hands a job out records
// its result: a claimed job, a job re-leased after its lease expired (the
// dispatcher re-publishes the same attempt), a job dequeued without a
// lease, a job that ran when its group was cancelled, and a retried job's
// last attempt.
func TestRecordKeepsLegitimateFlows(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: time.Second, BaseBackoff: time.Second, MaxBackoff: time.Second}, true)
	S := contracts.ResultSuccess

	// reclaimed: the lease expired and the job was re-leased as the same attempt
	enqueueN(t, q, "R", 1, "", 0)
	if r, err := q.Admit(ctx, 1); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	b.clock.advance(2 * time.Second)
	rc, err := q.Reclaim(ctx, 10)
	if err != nil || len(rc.Jobs) != 1 || rc.Jobs[0].Attempt != 1 {
		t.Fatalf("reclaim: %+v %v", rc, err)
	}
	if out, _ := q.Claim(ctx, G("R"), "j00000", 1); out != redisq.ClaimRun {
		t.Fatalf("claim: %s", out)
	}
	recordOne(t, q, result("R", "j00000", 1, S), redisq.Recorded)

	// dequeued without a lease
	enqueueN(t, q, "D", 1, "", 0)
	j, err := q.Dequeue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recordOne(t, q, result("D", j.ID, j.Attempt, S), redisq.Recorded)

	// cancelled while it ran: counted, and the group's counts add up
	enqueueN(t, q, "C", 2, "", 0)
	r, err := q.Admit(ctx, 1)
	if err != nil || len(r.Jobs) != 1 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	if out, _ := q.Claim(ctx, G("C"), r.Jobs[0].ID, 1); out != redisq.ClaimRun {
		t.Fatalf("claim: %s", out)
	}
	if cr, err := q.Cancel(ctx, G("C")); err != nil || cr.Dropped != 1 {
		t.Fatalf("cancel: %+v %v", cr, err)
	}
	rec := recordOne(t, q, result("C", r.Jobs[0].ID, 1, contracts.ResultFailed), redisq.Recorded)
	if c := rec.Group; c.State != contracts.StateCancelled || c.Done != 1 || c.Failed != 1 || c.Cancelled != 1 || c.Jobs != 2 {
		t.Fatalf("cancelled group after its running job settled: %+v", c)
	}

	// retried: the last attempt counts
	enqueueN(t, q, "T", 1, "", 0)
	if r, err := q.Admit(ctx, 1); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		if out, _ := q.Claim(ctx, G("T"), "j00000", attempt); out != redisq.ClaimRun {
			t.Fatalf("claim %d: %s", attempt, out)
		}
		if attempt == 3 {
			break
		}
		if _, err := q.Retry(ctx, G("T"), "j00000", attempt, -1, "503"); err != nil {
			t.Fatal(err)
		}
		b.clock.advance(2 * time.Second)
		if rel, err := q.Release(ctx, 10); err != nil || len(rel.Jobs) != 1 {
			t.Fatalf("release: %+v %v", rel, err)
		}
	}
	recordOne(t, q, result("T", "j00000", 3, S), redisq.Recorded)
	for _, g := range []string{"R", "D", "T"} {
		checkCounts(t, q, g, "", 1, 1, 0)
	}
}
