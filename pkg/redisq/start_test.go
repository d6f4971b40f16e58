package redisq_test

import (
	"context"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// claimAll enqueues n jobs of group gid, admits and claims them all.
func claimAll(t *testing.T, q *redisq.Queue, gid string, n int) []redisq.LeasedJob {
	t.Helper()
	ctx := context.Background()
	enqueueN(t, q, gid, n, "", 0)
	r := admit(t, q, n)
	if len(r.Jobs) != n {
		t.Fatalf("admitted %d of %d jobs", len(r.Jobs), n)
	}
	for _, j := range r.Jobs {
		if o, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || o != redisq.ClaimRun {
			t.Fatalf("claim %s: %v %v", j.ID, o, err)
		}
	}
	return r.Jobs
}

func delivery(j redisq.LeasedJob) redisq.Delivery {
	return redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt}
}

// A job claimed to run and not started yet (it waits for a worker's slot)
// is counted as cancelled instead of run when its group was cancelled
// meanwhile; a job of a running group starts.
func TestStartCountsJobsOfACancelledGroup(t *testing.T) {
	q, b := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	jobs := claimAll(t, q, "g", 3)
	if o, err := q.Start(ctx, delivery(jobs[0])); err != nil || o != redisq.ClaimRun {
		t.Fatalf("start in a running group: %v %v", o, err)
	}
	if _, err := q.Cancel(ctx, G("g")); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[1:] {
		if o, err := q.Start(ctx, delivery(j)); err != nil || o != redisq.ClaimCancelled {
			t.Fatalf("start of %s after the cancel: %v %v", j.ID, o, err)
		}
		if st := b.rdb.HGet(ctx, q.Keys().Job(j.Group, j.ID), "status").Val(); st != "CANCELLED" {
			t.Errorf("job %s is %s", j.ID, st)
		}
		if _, err := b.rdb.ZScore(ctx, q.Keys().Claims(), j.Group.Tenant+":"+j.Group.ID+":"+j.ID).Result(); err == nil {
			t.Errorf("job %s keeps its claim", j.ID)
		}
	}
	// Counted once: a second start is stale.
	if o, err := q.Start(ctx, delivery(jobs[1])); err != nil || o != redisq.ClaimStale {
		t.Fatalf("second start: %v %v", o, err)
	}
	info, _, err := q.Group(ctx, G("g"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State != contracts.StateCancelled || info.Cancelled != 2 {
		t.Fatalf("group after the starts: %+v", info.GroupCounts)
	}
}

// One StartBatch call checks jobs of several groups: the jobs of the
// group cancelled meanwhile are counted as cancelled (and the group ends
// with exact counts), the others start, and a job checked twice in the
// same call is stale the second time.
func TestStartBatchChecksJobsOfSeveralGroups(t *testing.T) {
	q, _ := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	live := claimAll(t, q, "live", 3)
	gone := claimAll(t, q, "gone", 3)
	if _, err := q.Cancel(ctx, G("gone")); err != nil {
		t.Fatal(err)
	}
	ds := []redisq.Delivery{delivery(live[0]), delivery(gone[0]), delivery(live[1]), delivery(gone[1]),
		delivery(gone[2]), delivery(gone[2])}
	out, err := q.StartBatch(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	want := []redisq.ClaimOutcome{redisq.ClaimRun, redisq.ClaimCancelled, redisq.ClaimRun, redisq.ClaimCancelled,
		redisq.ClaimCancelled, redisq.ClaimStale}
	if len(out) != len(want) {
		t.Fatalf("outcomes %v, want %v", out, want)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", out, want)
		}
	}
	info, _, err := q.Group(ctx, G("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State != contracts.StateCancelled || info.Cancelled != 3 {
		t.Fatalf("cancelled group after the starts: %s %+v", info.State, info.GroupCounts)
	}
	if out, err := q.StartBatch(ctx, nil); err != nil || out != nil {
		t.Fatalf("empty batch: %v %v", out, err)
	}
}

// The group's throttles count the retries after a rate limit only; its
// retries (the congestion statistics) count every one.
func TestGroupThrottlesCountOnlyRateLimits(t *testing.T) {
	q, _ := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	jobs := claimAll(t, q, "g", 3)
	for i, j := range jobs {
		var opts []redisq.RetryOption
		if i == 2 {
			opts = append(opts, redisq.Throttled())
		}
		if res, err := q.Retry(ctx, j.Group, j.ID, j.Attempt, -1, "boom", opts...); err != nil || res.Outcome != "parked" {
			t.Fatalf("retry %s: %+v %v", j.ID, res, err)
		}
	}
	info, _, err := q.Group(ctx, G("g"))
	if err != nil {
		t.Fatal(err)
	}
	cong, err := q.Congestion(ctx, G("g"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Throttles != 1 || cong.TotalThrottleCount != 3 {
		t.Fatalf("throttles %d, retries %d; want 1 and 3", info.Throttles, cong.TotalThrottleCount)
	}
}
