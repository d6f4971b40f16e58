package dispatcher_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/dispatcher"
)

// TestPausedGroupIsNotReadmitted: the jobs of a paused group that come due
// in the non-ready queue (released by the dispatcher) or whose admission
// lease expires (reclaimed by the dispatcher) are not published: they go
// back into their group's list, and the group stays out of its tenant's
// queue, so admission does not take them while it is paused. The jobs of a
// running group of the same tenant are released as usual.
func TestPausedGroupIsNotReadmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := pipelinetest.NewEnv(t, redisq.Config{Lease: 300 * time.Millisecond})
	paused, expired, running := grp("paused"), grp("expired"), grp("running")
	jobs := leaseJobs(t, e, []contracts.GroupRef{paused, expired, running}, 5)
	var backedOff []redisq.LeasedJob // the expired group's are never confirmed: their leases expire
	for _, j := range jobs {
		if j.Group != expired {
			backedOff = append(backedOff, j)
		}
	}
	park(t, e, backedOff, func(int) time.Duration { return 100 * time.Millisecond })
	for _, g := range []contracts.GroupRef{paused, expired} {
		if r, err := e.Queue.Pause(ctx, g); err != nil || r.Outcome != redisq.Paused {
			t.Fatalf("pause %s: %+v %v", g, r, err)
		}
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newDispatcher(t, e, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}, ReclaimInterval: 50 * time.Millisecond}))
	got := r.WaitJobs(t, 5, 10*time.Second)
	keys := e.Keys
	testkit.WaitFor(t, "the non-ready queue and the leases emptied", 10*time.Second, func() bool {
		return e.BackingOff(t) == 0 && e.Inflight(t) == 0
	})
	// Let the dispatcher run more cycles: nothing of the paused groups moves.
	time.Sleep(300 * time.Millisecond)
	got = r.Jobs()
	if len(got) != 5 {
		t.Fatalf("READY got %d jobs, want the running group's 5", len(got))
	}
	for _, m := range got {
		if m.Job.Ref() != running || m.Job.Attempt != 2 {
			t.Fatalf("%s (attempt %d) on READY, want only the running group's retries", m.Key(), m.Job.Attempt)
		}
	}

	for _, g := range []contracts.GroupRef{paused, expired} {
		ids, err := e.Redis.LRange(ctx, keys.GroupJobs(g), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		if want := []string{"j0000", "j0001", "j0002", "j0003", "j0004"}; !slices.Equal(ids, want) {
			t.Errorf("%s: list %v, want its jobs %v back in it", g, ids, want)
		}
		for _, jid := range ids {
			if h, err := redisq.ReadJob(ctx, e.Redis, keys, g, jid); err != nil || h["status"] != "QUEUED" {
				t.Errorf("%s/%s: status %q (%v), want QUEUED", g, jid, h["status"], err)
			}
		}
		if _, err := e.Redis.ZScore(ctx, keys.TenantGroups(tenant, contracts.PriorityNormal), keys.GroupMember(g)).Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("%s is in its tenant's queue while paused (err %v)", g, err)
		}
		info := e.Group(t, g)
		if info.State != contracts.StatePaused || info.Pending != 5 || info.InFlight != 0 || info.Done != 0 {
			t.Errorf("%s = %+v pending %d in flight %d", g, info.GroupCounts, info.Pending, info.InFlight)
		}
	}
	if _, err := e.Redis.ZScore(ctx, keys.FairQueue(contracts.PriorityNormal), tenant).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the tenant is in the fair queue with only paused groups waiting (err %v)", err)
	}

	// Resumed, a group goes back into its tenant's queue for admission.
	if res, err := e.Queue.Resume(ctx, paused); err != nil || res.Outcome != redisq.Resumed {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if _, err := e.Redis.ZScore(ctx, keys.TenantGroups(tenant, contracts.PriorityNormal), keys.GroupMember(paused)).Result(); err != nil {
		t.Fatalf("the resumed group is not in its tenant's queue: %v", err)
	}
}
