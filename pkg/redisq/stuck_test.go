package redisq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func stuckIDs(t *testing.T, q *redisq.Queue, after time.Duration) []string {
	t.Helper()
	groups, err := q.StuckGroups(context.Background(), after)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range groups {
		ids = append(ids, g.Group.ID)
	}
	return ids
}

func TestCandidateGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	enqueueN(t, q, "queued-high", 1, contracts.PriorityHigh, 0)
	enqueueN(t, q, "queued-low", 1, contracts.PriorityLow, 0)
	enqueueN(t, q, "admitted", 1, "", 0)
	enqueueN(t, q, "other/queued", 1, "", 0)
	// Admitting two jobs serves the high level, then the normal one: the
	// admitted groups started, so admission put them on the watch list;
	// "queued-low" is only in its tenant's queue.
	if r, err := q.Admit(ctx, 2); err != nil || len(r.Jobs) != 2 {
		t.Fatalf("admit: %+v %v", r, err)
	}
	if n, err := b.rdb.ZCard(ctx, q.Keys().FairQueue(contracts.PriorityHigh)).Result(); err != nil || n != 0 {
		t.Fatalf("high level holds %d tenants (%v)", n, err)
	}
	if err := q.WatchGroups(ctx, G("watched-only")); err != nil {
		t.Fatal(err)
	}
	got, err := q.CandidateGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []contracts.GroupRef{G("other/queued"), G("admitted"), G("queued-high"), G("queued-low"), G("watched-only")}
	if !slices.Equal(got, want) {
		t.Fatalf("CandidateGroups = %v, want %v", got, want)
	}
}

func TestStuckGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	enqueueN(t, q, "slow", 3, "", 0)
	enqueueN(t, q, "done", 1, "", 0)
	if _, err := q.Admit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for _, gid := range []string{"slow", "done"} {
		if _, err := q.Seal(ctx, G(gid), map[string]int64{"slow": 3, "done": 1}[gid]); err != nil {
			t.Fatal(err)
		}
	}
	if ids := stuckIDs(t, q, time.Minute); len(ids) != 0 {
		t.Fatalf("stuck right after admission: %v", ids)
	}

	b.clock.advance(2 * time.Minute)
	// "fresh" starts now; "done" completes; "slow" records one result, then
	// waits without progress.
	enqueueN(t, q, "fresh", 1, "", 0)
	if _, err := q.Admit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "done", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}); err != nil || !r.Completed {
		t.Fatalf("record done: %+v %v", r, err)
	}
	if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "slow", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	if ids := stuckIDs(t, q, time.Minute); len(ids) != 0 {
		t.Fatalf("stuck right after progress: %v", ids)
	}
	// "slow" waits for results: it is in no fair queue any more; the watch
	// list still finds it.
	b.clock.advance(90 * time.Second)
	if ids := stuckIDs(t, q, time.Minute); !slices.Equal(ids, []string{"fresh", "slow"}) {
		t.Fatalf("stuck = %v, want [fresh slow]", ids)
	}
	groups, err := q.StuckGroups(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g := groups[1]; g.State != contracts.StateAggregating || g.Done != 1 || g.LastProgressAtMs == 0 {
		t.Fatalf("stuck group info: %+v", g)
	}
	if ids := stuckIDs(t, q, 2*time.Minute); len(ids) != 0 {
		t.Fatalf("stuck with a longer threshold = %v, want none", ids)
	}
	// The completed group was taken off the watch list; the others stay on
	// it, in the order they were first watched.
	watched, err := b.rdb.ZRange(ctx, q.Keys().StuckWatch(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(watched, []string{"t:slow", "t:fresh"}) {
		t.Fatalf("watch list = %v, want [slow fresh]", watched)
	}
}
