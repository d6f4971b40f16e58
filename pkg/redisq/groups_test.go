package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestEnqueueIsIdempotent(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	job := redisq.Job{Group: G("g"), ID: "j1", Type: "t", Payload: []byte(`{"a":1}`)}
	if o, err := q.Enqueue(ctx, job); err != nil || o != redisq.Added {
		t.Fatalf("first enqueue: %v %v", o, err)
	}
	// The job moves on; a redelivered submission must not reset it.
	if _, err := q.Dequeue(ctx); err != nil {
		t.Fatal(err)
	}
	job.Payload = []byte(`{"a":2}`)
	out, err := q.EnqueueBatch(ctx, []redisq.Job{job, job, {Group: G("g"), ID: "j2", Type: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != redisq.Duplicate || out[1] != redisq.Duplicate || out[2] != redisq.Added {
		t.Fatalf("outcomes %v", out)
	}
	info, _, err := q.Group(ctx, G("g"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Jobs != 2 || info.Pending != 1 {
		t.Fatalf("jobs %d pending %d, want 2 and 1", info.Jobs, info.Pending)
	}
	h, _ := b.rdb.HGetAll(ctx, q.Keys().Job(G("g"), "j1")).Result()
	if h["payload"] != `{"a":1}` || h["status"] != "LEASED" || h["attempt"] != "1" {
		t.Fatalf("duplicate changed the job: %v", h)
	}
}

func TestJobKeysAreScopedByGroup(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("a"), ID: "same", Type: "t"}, {Group: G("b"), ID: "same", Type: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != redisq.Added || out[1] != redisq.Added {
		t.Fatalf("a tenant's job id collided with another's: %v", out)
	}
}

func TestRecordExactlyOnce(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "g", 2, "", 0)
	drain(t, q, 2)
	res := contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}
	r1, err := q.Record(ctx, res)
	if err != nil || r1.Outcome != redisq.Recorded {
		t.Fatalf("first record: %+v %v", r1, err)
	}
	res.Status = contracts.ResultFailed // a late, different result for the same job
	r2, err := q.Record(ctx, res)
	if err != nil || r2.Outcome != redisq.DuplicateResult {
		t.Fatalf("second record: %+v %v", r2, err)
	}
	if g := r2.Group; g.Done != 1 || g.Succeeded != 1 || g.Failed != 0 {
		t.Fatalf("counts after duplicate: %+v", g)
	}
	r3, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: "nope", Attempt: 1, Status: contracts.ResultSuccess})
	if err != nil || r3.Outcome != redisq.UnknownJob {
		t.Fatalf("unknown job: %+v %v", r3, err)
	}
}

func TestSealOrderings(t *testing.T) {
	const n = 5
	type step func(t *testing.T, q *redisq.Queue) int // returns completions seen
	ctx := context.Background()
	seal := func(t *testing.T, q *redisq.Queue) int {
		r, err := q.Seal(ctx, G("g"), n)
		if err != nil || (r.Outcome != redisq.Sealed) {
			t.Fatalf("seal: %+v %v", r, err)
		}
		if r.Transition == contracts.StateCompleted {
			return 1
		}
		return 0
	}
	enqueue := func(t *testing.T, q *redisq.Queue) int { enqueueN(t, q, "g", n, "", 0); return 0 }
	run := func(from, to int) step {
		return func(t *testing.T, q *redisq.Queue) int {
			done := 0
			for i := from; i < to; i++ {
				if _, err := q.Dequeue(ctx); err != nil {
					t.Fatal(err)
				}
				r, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: fmt.Sprintf("j%05d", i), Attempt: 1, Status: contracts.ResultSuccess})
				if err != nil {
					t.Fatal(err)
				}
				if r.Completed {
					done++
				}
			}
			return done
		}
	}
	cases := map[string][]step{
		"seal first":     {seal, enqueue, run(0, n)},
		"seal in middle": {enqueue, run(0, 2), seal, run(2, n)},
		"seal last":      {enqueue, run(0, n), seal},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q, _ := setup(t, redisq.Config{}, false)
			completions := 0
			for _, s := range steps {
				completions += s(t, q)
			}
			if completions != 1 {
				t.Fatalf("completed %d times, want once", completions)
			}
			info, _, err := q.Group(ctx, G("g"))
			if err != nil {
				t.Fatal(err)
			}
			if info.State != contracts.StateCompleted || info.Succeeded != n || info.Done != n {
				t.Fatalf("group %+v", info.GroupCounts)
			}
			// A redelivered seal changes nothing.
			if r, _ := q.Seal(ctx, G("g"), n); r.Outcome != redisq.SealEnded {
				t.Fatalf("re-seal: %v", r.Outcome)
			}
		})
	}
}

func TestSealRules(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "g", 3, "", 0)
	if r, _ := q.Seal(ctx, G("g"), 2); r.Outcome != redisq.SealTooMany {
		t.Fatalf("seal below received: %v", r.Outcome)
	}
	if r, _ := q.Seal(ctx, G("g"), 4); r.Outcome != redisq.Sealed {
		t.Fatalf("seal: %v", r.Outcome)
	}
	if r, _ := q.Seal(ctx, G("g"), 4); r.Outcome != redisq.SealSame {
		t.Fatalf("same seal: %v", r.Outcome)
	}
	if r, _ := q.Seal(ctx, G("g"), 5); r.Outcome != redisq.SealConflict {
		t.Fatalf("other seal: %v", r.Outcome)
	}
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("g"), ID: "x", Type: "t"}, {Group: G("g"), ID: "y", Type: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != redisq.Added || out[1] != redisq.RejectedSealed {
		t.Fatalf("beyond the declared total: %v", out)
	}
	// An empty sealed group completes at once.
	if r, _ := q.Seal(ctx, G("empty"), 0); r.Transition != contracts.StateCompleted {
		t.Fatalf("empty group: %+v", r)
	}
}

func TestCancelDropsQueuedJobs(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "g", 10, "", 0)
	enqueueN(t, q, "other", 2, "", 0)
	if _, err := q.Seal(ctx, G("g"), 10); err != nil {
		t.Fatal(err)
	}
	jobs, err := q.DequeueBatch(ctx, 3) // g, other, g
	if err != nil {
		t.Fatal(err)
	}
	r, err := q.Cancel(ctx, G("g"))
	if err != nil || r.Outcome != redisq.Cancelled {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if r.Dropped != 8 || r.Group.State != contracts.StateCancelled {
		t.Fatalf("dropped %d state %s", r.Dropped, r.Group.State)
	}
	// The jobs already handed out finish and are counted.
	for _, j := range jobs {
		if j.Group.ID == "g" {
			if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: j.ID, Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, _, _ := q.Group(ctx, G("g"))
	if info.Succeeded+info.Failed+info.Cancelled != 10 || info.Pending != 0 {
		t.Fatalf("counts after cancel: %+v pending %d", info.GroupCounts, info.Pending)
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().TenantGroups(testTenant, contracts.PriorityNormal)).Result(); n != 1 {
		t.Fatalf("%d groups queued, want only the other", n)
	}
	if r, _ := q.Cancel(ctx, G("g")); r.Outcome != redisq.CancelEnded {
		t.Fatalf("second cancel: %v", r.Outcome)
	}
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: G("g"), ID: "late", Type: "t"}); o != redisq.RejectedEnded {
		t.Fatalf("enqueue into a cancelled group: %v", o)
	}
}

// TestCancelBeforeTheFirstJob: a cancel that arrives before a group's first
// job was once dropped ("unknown group"), and the jobs that followed ran.
// It now creates the group CANCELLED, with a TTL, and the jobs that follow
// are rejected as jobs of an ended group.
func TestCancelBeforeTheFirstJob(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GroupTTL: time.Hour}, false)
	res, err := q.Cancel(ctx, G("early"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != redisq.Cancelled || res.Group.State != contracts.StateCancelled || res.Group.Jobs != 0 {
		t.Fatalf("cancel of a group with no job yet: %+v", res)
	}
	if ttl := b.rdb.TTL(ctx, q.Keys().GroupMeta(G("early"))).Val(); ttl <= 0 {
		t.Fatalf("the cancelled group's meta has TTL %v", ttl)
	}
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("early"), ID: "j1", Type: "t"}})
	if err != nil || out[0] != redisq.RejectedEnded {
		t.Fatalf("job after the cancel: %v %v", out, err)
	}
	if again, err := q.Cancel(ctx, G("early")); err != nil || again.Outcome != redisq.CancelEnded {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
}
