package redisq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// runToCompletion admits, claims and records every job of the group until
// it completes (or nothing moves any more).
func runToCompletion(t *testing.T, q *redisq.Queue, g contracts.GroupRef) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		var jobs []redisq.LeasedJob
		r := admit(t, q, 100)
		jobs = append(jobs, r.Jobs...)
		rc, err := q.Reclaim(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, rc.Jobs...)
		for _, j := range jobs {
			if o, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || o != redisq.ClaimRun {
				t.Fatalf("claim %s: %v %v", j.ID, o, err)
			}
			if _, err := q.Record(ctx, contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID,
				Attempt: j.Attempt, Status: contracts.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
		}
		if info, _, _ := q.Group(ctx, g); info.State == contracts.StateCompleted {
			return
		}
		if len(jobs) == 0 {
			break
		}
	}
	info, _, _ := q.Group(ctx, g)
	t.Fatalf("group %s did not complete: %+v", g, info.GroupCounts)
}

func TestRepairStuckGroups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		max     int64
		corrupt func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef)
		want    string
	}{
		{"lease entry lost", 0, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			// leased, and the inflight entry the reclaim works from is gone
			for _, j := range admit(t, q, 100).Jobs {
				if j.Group == g {
					b.rdb.ZRem(context.Background(), q.Keys().Inflight(), g.Tenant+":"+g.ID+":"+j.ID)
				}
			}
		}, redisq.RepairLease},
		{"result lost after a rollback", 0, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			// claimed (RUNNING, no lease entry): the result was recorded
			// and acknowledged, then lost with the Redis that came back
			// older; nothing runs the jobs again
			ctx := context.Background()
			for _, j := range admit(t, q, 100).Jobs {
				if j.Group != g {
					continue
				}
				if o, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || o != redisq.ClaimRun {
					t.Fatalf("claim %s: %v %v", j.ID, o, err)
				}
			}
			// their claims expire (nobody renews them); a first repair
			// only notes that, and the next one, a claim TTL later,
			// re-leases them
			b.clock.advance(time.Minute)
			r, err := q.RepairGroup(ctx, g)
			if err != nil || r.Suspected != 3 || r.Leases != 0 {
				t.Fatalf("first repair: %+v %v, want 3 suspected and no lease", r, err)
			}
			b.clock.advance(time.Minute)
		}, redisq.RepairLease},
		{"out of the fair queue", 0, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			b.rdb.ZRem(context.Background(), q.Keys().TenantGroups(g.Tenant, contracts.PriorityNormal), g.ID)
		}, redisq.RepairQueue},
		{"tenant out of the level", 0, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			b.rdb.ZRem(context.Background(), q.Keys().FairQueue(contracts.PriorityNormal), g.Tenant)
		}, redisq.RepairQueue},
		{"in-flight slots leaked", 2, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			// the limit is used up by slots no job holds: the group is
			// taken out of the queue as at its limit
			ctx := context.Background()
			b.rdb.HSet(ctx, q.Keys().GroupMeta(g), "inFlight", 2)
			b.rdb.ZRem(ctx, q.Keys().TenantGroups(g.Tenant, contracts.PriorityNormal), g.ID)
			b.rdb.ZRem(ctx, q.Keys().FairQueue(contracts.PriorityNormal), g.Tenant)
		}, redisq.RepairInFlight},
		{"done but not completed", 0, func(t *testing.T, q *redisq.Queue, b *testBundle, g contracts.GroupRef) {
			// every job ended, the completion was lost
			ctx := context.Background()
			for _, j := range admit(t, q, 100).Jobs {
				b.rdb.HSet(ctx, q.Keys().Job(g, j.ID), "status", "SUCCESS")
				b.rdb.ZRem(ctx, q.Keys().Inflight(), g.Tenant+":"+g.ID+":"+j.ID)
			}
			b.rdb.HSet(ctx, q.Keys().GroupMeta(g), "doneJobs", 3, "successCount", 3)
		}, redisq.RepairComplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: time.Minute}, true)
			g := G("stuck")
			enqueueJobs(t, q, "stuck", "t", 3, tc.max)
			enqueueJobs(t, q, "x/bystander", "t", 1, 0)
			if _, err := q.Seal(ctx, g, 3); err != nil {
				t.Fatal(err)
			}
			tc.corrupt(t, q, b, g)
			if tc.want != redisq.RepairComplete {
				// Without the repair the group never completes: the
				// pipeline's own paths do not find its jobs.
				for _, j := range admit(t, q, 100).Jobs {
					if j.Group == g {
						t.Fatalf("corruption did not hold: admitted %s", j.ID)
					}
				}
				b.clock.advance(2 * time.Minute)
				rc, err := q.Reclaim(ctx, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range rc.Jobs {
					if j.Group == g {
						t.Fatalf("corruption did not hold: reclaimed %s", j.ID)
					}
				}
			}
			r, err := q.RepairGroup(ctx, g, redisq.SweepChunk(2))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(r.Reasons(), tc.want) {
				t.Fatalf("repair reasons %v, want %s (%+v)", r.Reasons(), tc.want, r)
			}
			if tc.want == redisq.RepairComplete {
				if !r.Completed || r.Counts.State != contracts.StateCompleted {
					t.Fatalf("not completed: %+v", r)
				}
			} else {
				b.clock.advance(2 * time.Minute) // a restored lease is already due
				runToCompletion(t, q, g)
			}
			// A healthy group needs nothing.
			if r, err := q.RepairGroup(ctx, G("x/bystander")); err != nil || len(r.Reasons()) != 0 {
				t.Fatalf("bystander repair: %v %v", r.Reasons(), err)
			}
		})
	}
}

// A running job is never run again while its worker renews its claim, however
// long its group records nothing; once the claim expires it is re-leased only
// a claim TTL after the repair first saw it expired, and only when every
// result published before that is recorded (docs/ARCHITECTURE.md §6.5).
func TestRepairTakesRunsAsLostByLivenessAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: time.Minute, ClaimTTL: 30 * time.Second}, true)
	g := G("long")
	enqueueJobs(t, q, "long", "t", 3, 0)
	if _, err := q.Seal(ctx, g, 3); err != nil {
		t.Fatal(err)
	}
	var ds []redisq.Delivery
	for _, j := range admit(t, q, 100).Jobs {
		if err := q.Confirm(ctx, j); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt})
	}
	cs, err := q.ClaimBatch(ctx, ds)
	if err != nil || len(cs) != 3 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	repair := func(settled time.Time) *redisq.Repair {
		t.Helper()
		r, err := q.RepairGroup(ctx, g, redisq.ResultsSettledThrough(settled))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// An hour of jobs running, their worker renewing every 10 s: no
	// repair takes them, whatever their group's silence.
	for i := 0; i < 360; i++ {
		b.clock.advance(10 * time.Second)
		if n, err := q.RenewClaims(ctx, ds); err != nil || n != 3 {
			t.Fatalf("renew: %d %v", n, err)
		}
		if i%60 == 59 {
			if r := repair(b.clock.now()); r.Leases != 0 || r.Suspected != 0 || r.Held != 3 {
				t.Fatalf("after %s of renewed claims: %+v", time.Duration(i+1)*10*time.Second, r)
			}
		}
	}
	// The worker stops: the claims expire, the first repair only notes it.
	b.clock.advance(31 * time.Second)
	if r := repair(b.clock.now()); r.Leases != 0 || r.Suspected != 3 {
		t.Fatalf("first repair after the claims expired: %+v, want 3 suspected", r)
	}
	seen := b.clock.now()
	// A worker that renews again (it was alive: a Redis that came back
	// older showed its claim expired) keeps its job.
	if n, err := q.RenewClaims(ctx, ds[:1]); err != nil || n != 1 {
		t.Fatalf("renew: %d %v", n, err)
	}
	b.clock.advance(20 * time.Second)
	// Results published before the sighting are still on RESULT: nothing
	// is re-leased, whatever the time.
	b.clock.advance(20 * time.Second)
	// (The renewed job's claim has expired since: it is noted.)
	if r := repair(seen.Add(-time.Millisecond)); r.Leases != 0 || r.Suspected != 1 {
		t.Fatalf("re-leased with results still on RESULT: %+v, want no lease and 1 suspected", r)
	}
	// RESULT is settled: the two jobs nobody renewed are re-leased; the
	// renewed one waits a claim TTL from its new sighting.
	r := repair(b.clock.now())
	if r.Leases != 2 || r.Suspected != 0 {
		t.Fatalf("repair with RESULT settled: %+v, want 2 leases", r)
	}
	rc, err := q.Reclaim(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var again []string
	for _, j := range rc.Jobs {
		if j.Attempt != ds[0].Attempt {
			t.Errorf("re-published %s as attempt %d, want %d", j.ID, j.Attempt, ds[0].Attempt)
		}
		again = append(again, j.ID)
	}
	slices.Sort(again)
	if want := []string{ds[1].JobID, ds[2].JobID}; !slices.Equal(again, want) {
		t.Fatalf("re-published %v, want %v", again, want)
	}
}

func TestAbandonIdleUnsealedGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)
	enqueueN(t, q, "idle", 5, "", 0)
	enqueueN(t, q, "sealed", 1, "", 0)
	if _, err := q.Seal(ctx, G("sealed"), 1); err != nil {
		t.Fatal(err)
	}
	r := admit(t, q, 100)
	for _, j := range r.Jobs { // every job of idle ends: a group with work is never abandoned
		if j.Group == G("idle") {
			if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "idle", JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := q.AbandonIdle(ctx, 24*time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("abandoned while active: %v %v", got, err)
	}
	b.clock.advance(25 * time.Hour)
	got, err := q.AbandonIdle(ctx, 24*time.Hour, redisq.SweepChunk(2))
	if err != nil || !slices.Equal(got, []contracts.GroupRef{G("idle")}) {
		t.Fatalf("abandoned %v (%v), want the unsealed idle group", got, err)
	}
	if watched, _ := b.rdb.ZRange(ctx, q.Keys().StuckWatch(), 0, -1).Result(); slices.Contains(watched, "t:idle") {
		t.Fatal("abandoned group still watched")
	}
	if ids := stuckIDs(t, q, time.Minute); slices.Contains(ids, "idle") {
		t.Fatalf("abandoned group reported stuck: %v", ids)
	}
	keys, err := b.rdb.Keys(ctx, b.prefix+"*t:idle*").Result()
	if err != nil || len(keys) < 5 {
		t.Fatalf("keys of the idle group: %v %v", keys, err)
	}
	for _, k := range keys {
		if ttl := b.rdb.TTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("key %s of the abandoned group has no TTL (%v)", k, ttl)
		}
	}
}

// A second delivery of a running job's attempt does not run it again while
// its holder's claim lives: the holder itself drops it, any other holder is
// told to come back when the claim expires. A hand-back ends the claim, as
// does the holder's being declared gone; an expired claim lets the delivery
// run (the holder stopped).
func TestSecondDeliveryOfAHeldJobDoesNotRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: time.Minute, ClaimTTL: 30 * time.Second}, true)
	enqueueJobs(t, q, "dup", "t", 4, 0)
	var ds []redisq.Delivery
	for _, j := range admit(t, q, 100).Jobs {
		if err := q.Confirm(ctx, j); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt})
	}
	claim := func(holder string, d ...redisq.Delivery) []redisq.Claimed {
		t.Helper()
		cs, err := q.ClaimBatch(ctx, d, redisq.ClaimHolder(holder))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	for _, c := range claim("a", ds...) {
		if c.Outcome != redisq.ClaimRun {
			t.Fatalf("first claim: %+v", c)
		}
	}
	b.clock.advance(10 * time.Second)
	// the same attempt delivered again (a re-published pack of another
	// make-up): its holder drops it, another holder waits for the claim
	if c := claim("a", ds[0])[0]; c.Outcome != redisq.ClaimStale {
		t.Fatalf("second delivery to the holder: %+v, want stale", c)
	}
	if c := claim("b", ds[0])[0]; c.Outcome != redisq.ClaimBusy || c.RetryIn <= 19*time.Second || c.RetryIn > 21*time.Second {
		t.Fatalf("second delivery to another holder: %+v, want busy for about 20s", c)
	}
	// a renewal keeps it busy past the first deadline
	if _, err := q.RenewClaims(ctx, ds); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(25 * time.Second)
	if c := claim("b", ds[0])[0]; c.Outcome != redisq.ClaimBusy {
		t.Fatalf("after a renewal: %+v, want busy", c)
	}
	// handed back on purpose: the next delivery runs at once, not a suspect
	if err := q.HandBack(ctx, ds[1]); err != nil {
		t.Fatal(err)
	}
	if c := claim("b", ds[1])[0]; c.Outcome != redisq.ClaimRun || c.Suspect {
		t.Fatalf("after a hand-back: %+v, want run, not a suspect", c)
	}
	// the holder declared gone (its successor found its held file): runs
	// at once, as a suspect
	if err := q.HolderGone(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if c := claim("c", ds[2])[0]; c.Outcome != redisq.ClaimRun || !c.Suspect {
		t.Fatalf("after the holder was declared gone: %+v, want run as a suspect", c)
	}
	// the claim expired (nobody renewed it): runs, as a suspect
	b.clock.advance(31 * time.Second)
	if c := claim("c", ds[3])[0]; c.Outcome != redisq.ClaimRun || !c.Suspect {
		t.Fatalf("after the claim expired: %+v, want run as a suspect", c)
	}
}

// TestHandBackHeldEndsOnlyTheHoldersClaims: a worker whose claim call lost
// its answer hands back what it holds (HandBackHeld): a job its claim did
// take runs at its next delivery to it instead of being dropped as its
// own, and a job another holder runs is left alone (still busy).
func TestHandBackHeldEndsOnlyTheHoldersClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Lease: time.Minute, ClaimTTL: 30 * time.Second}, true)
	enqueueJobs(t, q, "lost", "t", 2, 0)
	var ds []redisq.Delivery
	for _, j := range admit(t, q, 100).Jobs {
		if err := q.Confirm(ctx, j); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt})
	}
	claim := func(holder string, d redisq.Delivery) redisq.Claimed {
		t.Helper()
		cs, err := q.ClaimBatch(ctx, []redisq.Delivery{d}, redisq.ClaimHolder(holder))
		if err != nil {
			t.Fatal(err)
		}
		return cs[0]
	}
	// a's claim of the first job ran, its answer lost; b holds the second.
	if c := claim("a", ds[0]); c.Outcome != redisq.ClaimRun {
		t.Fatalf("a's claim: %+v", c)
	}
	if c := claim("b", ds[1]); c.Outcome != redisq.ClaimRun {
		t.Fatalf("b's claim: %+v", c)
	}
	if c := claim("a", ds[0]); c.Outcome != redisq.ClaimStale {
		t.Fatalf("without the hand-back a's next delivery is dropped as its own: %+v", c)
	}
	if err := q.HandBackHeld(ctx, "a", ds...); err != nil {
		t.Fatal(err)
	}
	if c := claim("a", ds[0]); c.Outcome != redisq.ClaimRun || c.Suspect {
		t.Fatalf("a's next delivery after its hand-back: %+v, want run, not a suspect", c)
	}
	if c := claim("a", ds[1]); c.Outcome != redisq.ClaimBusy {
		t.Fatalf("b's job after a's hand-back: %+v, want still busy", c)
	}
}
