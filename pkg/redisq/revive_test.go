package redisq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestEnqueueRevivesAbandonedGroup: jobs arriving for an abandoned group
// (its keys under the group TTL) bring it back to life: its keys lose their
// TTLs, abandonedAt is cleared, it is watched again, and it is not
// abandoned again before it has no work and idles once more. A finished
// job keeps its TTL.
func TestEnqueueRevivesAbandonedGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour, JobTTL: time.Minute}, true)
	enqueueN(t, q, "idle", 2, "", 0)
	g := G("idle")
	recordAll := func(jobs []redisq.LeasedJob) {
		t.Helper()
		for _, j := range jobs {
			if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "idle", JobID: j.ID, Attempt: j.Attempt,
				Status: contracts.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recordAll(admit(t, q, 2).Jobs) // the group RUNNING and watched, with nothing left to do
	b.clock.advance(25 * time.Hour)
	if got, err := q.AbandonIdle(ctx, 24*time.Hour); err != nil || !slices.Equal(got, []contracts.GroupRef{g}) {
		t.Fatalf("abandoned %v (%v), want the idle group", got, err)
	}
	k := q.Keys()
	for _, key := range []string{k.GroupMeta(g), k.GroupIDs(g)} {
		if ttl := b.rdb.TTL(ctx, key).Val(); ttl <= 0 {
			t.Fatalf("abandoned: %s has no TTL (%v)", key, ttl)
		}
	}

	// A new job and a duplicate arrive.
	out, err := q.EnqueueBatch(ctx, []redisq.Job{
		{Group: g, ID: "j00001", Type: "t", Payload: []byte(`{}`)},
		{Group: g, ID: "new", Type: "t", Payload: []byte(`{}`)},
	})
	if err != nil || out[0] != redisq.Duplicate || out[1] != redisq.Added {
		t.Fatalf("enqueue into the abandoned group: %v %v", out, err)
	}
	for _, key := range []string{k.GroupMeta(g), k.GroupJobs(g), k.GroupIDs(g), k.GroupQueued(g)} {
		if ttl := b.rdb.TTL(ctx, key).Val(); ttl != -1 {
			t.Errorf("revived: %s has TTL %v, want none", key, ttl)
		}
	}
	if ttl := b.rdb.TTL(ctx, k.Job(g, "j00000")).Val(); ttl <= 0 {
		t.Errorf("revived: the finished job's hash lost its TTL (%v)", ttl)
	}
	meta := b.rdb.HGetAll(ctx, k.GroupMeta(g)).Val()
	if _, ok := meta["abandonedAt"]; ok {
		t.Errorf("revived group still marked abandoned: %v", meta)
	}
	if meta["status"] != "RUNNING" {
		t.Errorf("revived group status %q, want RUNNING", meta["status"])
	}
	if watched := b.rdb.ZRange(ctx, k.StuckWatch(), 0, -1).Val(); !slices.Contains(watched, "t:idle") {
		t.Errorf("revived group not watched: %v", watched)
	}
	// Its new job is work: not abandoned however long it waits; once it
	// ran, after another idle period.
	b.clock.advance(25 * time.Hour)
	if got, err := q.AbandonIdle(ctx, 24*time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("abandoned with a job queued: %v %v", got, err)
	}
	recordAll(admit(t, q, 1).Jobs)
	if got, err := q.AbandonIdle(ctx, 24*time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("abandoned right after its last result: %v %v", got, err)
	}
	b.clock.advance(25 * time.Hour)
	if got, err := q.AbandonIdle(ctx, 24*time.Hour); err != nil || len(got) != 1 {
		t.Fatalf("not abandoned after idling again: %v %v", got, err)
	}
	if ttl := b.rdb.TTL(ctx, k.GroupMeta(g)).Val(); ttl <= 0 {
		t.Errorf("abandoned again: its meta has no TTL (%v)", ttl)
	}
}

// TestEnqueueIntoLiveGroupKeepsNoTTL: enqueue into a group that was never
// abandoned changes no TTL (the revival is only for abandoned groups).
func TestEnqueueIntoLiveGroupKeepsNoTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)
	enqueueN(t, q, "live", 2, "", 0)
	if watched := b.rdb.ZCard(ctx, q.Keys().StuckWatch()).Val(); watched != 0 {
		t.Fatalf("a new group put on the watch list by enqueue: %d", watched)
	}
	if _, ok := b.rdb.HGetAll(ctx, q.Keys().GroupMeta(G("live"))).Val()["lastProgressAt"]; ok {
		t.Fatal("enqueue set lastProgressAt on a live group")
	}
}
