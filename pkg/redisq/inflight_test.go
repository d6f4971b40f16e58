package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// inFlightOf reads a group's in-flight counter and counts its jobs whose
// hash says LEASED or RUNNING.
func inFlightOf(t *testing.T, q *redisq.Queue, b *testBundle, name string, n int) (counter, leased int64) {
	t.Helper()
	ctx := context.Background()
	info, ok, err := q.Group(ctx, G(name))
	if err != nil || !ok {
		t.Fatalf("group %s: %v %v", name, ok, err)
	}
	for i := 0; i < n; i++ {
		switch st, _ := b.rdb.HGet(ctx, q.Keys().Job(G(name), fmt.Sprintf("j%05d", i)), "status").Result(); st {
		case "LEASED", "RUNNING":
			leased++
		}
	}
	return info.InFlight, leased
}

// TestMaxInFlightIsNeverExceeded: a group's admitted but unfinished jobs
// never exceed its maxInFlight, whatever the calls; a group at its limit is
// passed by (others are served meanwhile), and each result frees a slot.
func TestMaxInFlightIsNeverExceeded(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, b := setup(t, redisq.Config{Mode: mode, GlobalLimit: 1_000_000, Window: time.Hour, Burst: time.Hour}, false)
			const n, limit = 60, 3
			enqueueJobs(t, q, "lim", "t", n, limit)
			enqueueJobs(t, q, "free", "t", n, 0)
			var running []redisq.LeasedJob
			done, freeAdmitted := 0, 0
			for round := 0; done < n; round++ {
				if round > 1000 {
					t.Fatalf("no progress: %d of %d done", done, n)
				}
				r := admit(t, q, 7)
				for _, j := range r.Jobs {
					if j.Group.ID == "lim" {
						running = append(running, j)
					} else {
						freeAdmitted++
					}
				}
				counter, leased := inFlightOf(t, q, b, "lim", n)
				if counter > limit || leased > limit || counter != leased {
					t.Fatalf("round %d: counter %d, jobs in flight %d, limit %d", round, counter, leased, limit)
				}
				// finish one or two of the running jobs, the oldest first
				k := min(len(running), 1+round%2)
				rs := make([]contracts.JobResult, k)
				for i, j := range running[:k] {
					rs[i] = contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultSuccess}
				}
				running = running[k:]
				if k > 0 {
					if _, err := q.RecordBatch(ctx, rs); err != nil {
						t.Fatal(err)
					}
					// a redelivered result frees nothing more
					if _, err := q.RecordBatch(ctx, rs); err != nil {
						t.Fatal(err)
					}
				}
				done += k
			}
			if freeAdmitted != n {
				t.Fatalf("the unlimited group got %d of its %d jobs admitted meanwhile", freeAdmitted, n)
			}
			if counter, leased := inFlightOf(t, q, b, "lim", n); counter != 0 || leased != 0 {
				t.Fatalf("at the end: counter %d, jobs in flight %d", counter, leased)
			}
		})
	}
}

// TestMaxInFlightSlotsAndPlace: a group at its limit keeps its place; a
// retry, a cancelled claim and a result each free a slot (once), a lease
// that expires keeps it, and a due backed-off job of a full group waits in
// its group's queue.
func TestMaxInFlightSlotsAndPlace(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: 5 * time.Second}, true)
	enqueueJobs(t, q, "lim", "t", 10, 1)
	enqueueN(t, q, "other", 10, "", 0)
	r := admit(t, q, 4)
	if got := groupsOf(r.Jobs); got != "lim,other,other,other" {
		t.Fatalf("admitted %s", got)
	}
	j0 := r.Jobs[0]
	if info, _, _ := q.Group(ctx, G("lim")); info.InFlight != 1 || info.Pending != 9 {
		t.Fatalf("lim: in flight %d pending %d", info.InFlight, info.Pending)
	}
	// The expired lease is re-leased: still in flight.
	b.clock.advance(6 * time.Second)
	if rc, _ := q.Reclaim(ctx, 10); len(rc.Jobs) != 4 {
		t.Fatalf("reclaimed %d", len(rc.Jobs))
	}
	if got := groupsOf(admit(t, q, 1).Jobs); got != "other" {
		t.Fatalf("with lim full: %s", got)
	}
	// A retry frees the slot: lim is served next, from its old place.
	if o, _ := q.Claim(ctx, j0.Group, j0.ID, 1); o != redisq.ClaimRun {
		t.Fatalf("claim %v", o)
	}
	if rr, err := q.Retry(ctx, j0.Group, j0.ID, 1, -1, "boom"); err != nil || rr.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", rr, err)
	}
	if rr, _ := q.Retry(ctx, j0.Group, j0.ID, 1, -1, "boom"); rr.Outcome != "stale" {
		t.Fatalf("second retry: %+v", rr)
	}
	if info, _, _ := q.Group(ctx, G("lim")); info.InFlight != 0 {
		t.Fatalf("after retry: in flight %d", info.InFlight)
	}
	r = admit(t, q, 2)
	if got := groupsOf(r.Jobs); got != "lim,other" {
		t.Fatalf("after the retry freed a slot: %s", got)
	}
	j1 := r.Jobs[0]
	// j0 comes due while lim is full: it waits in lim's queue.
	b.clock.advance(2 * time.Second)
	rel, err := q.Release(ctx, 10)
	if err != nil || len(rel.Jobs) != 0 || rel.Requeued != 1 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	// The result frees the slot; j0 (back at the front of the queue) is next.
	if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "lim", JobID: j1.ID, Attempt: j1.Attempt, Status: contracts.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	r = admit(t, q, 1)
	if len(r.Jobs) != 1 || r.Jobs[0].ID != j0.ID || r.Jobs[0].Attempt != 2 {
		t.Fatalf("after the result: %+v", r.Jobs)
	}
	// Cancel: the leased job's claim counts it cancelled and frees its slot.
	if _, err := q.Cancel(ctx, G("lim")); err != nil {
		t.Fatal(err)
	}
	if o, _ := q.Claim(ctx, G("lim"), j0.ID, 2); o != redisq.ClaimCancelled {
		t.Fatalf("claim after cancel: %v", o)
	}
	if info, _, _ := q.Group(ctx, G("lim")); info.InFlight != 0 {
		t.Fatalf("after the cancelled claim: in flight %d", info.InFlight)
	}
	// The counter never goes below 0 (here it was lost: a job in flight
	// that it does not count finishes).
	if err := b.rdb.HSet(ctx, q.Keys().GroupMeta(G("other")), "inFlight", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "other", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	if info, _, _ := q.Group(ctx, G("other")); info.InFlight != 0 {
		t.Fatalf("a lost count went to %d", info.InFlight)
	}
}
