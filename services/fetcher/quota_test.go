package fetcher_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestOverQuotaIsDeadLettered: with a quota of 10 queued jobs and 2 active
// groups per tenant, the message that reaches exactly 10 is stored and the
// next ones are dead-lettered whole on <prefix>.dlq.over_quota, naming the
// quota, its limit and the tenant's count; so is a message that would
// create a third group. Nothing of them is stored, and other tenants'
// submissions are accepted meanwhile.
func TestOverQuotaIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{TenantMaxQueuedJobs: 10, TenantMaxActiveGroups: 2})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	g, h := contracts.Group("t1", "g"), contracts.Group("t1", "h")
	a, b, c := contracts.Group("t3", "a"), contracts.Group("t3", "b"), contracts.Group("t3", "c")
	other := contracts.Group("t2", "g")

	publishRaw(t, e, e.Names.Submit(g), jobsBody(g, 0, 6))
	publishRaw(t, e, e.Names.Submit(g), jobsBody(g, 6, 10)) // exactly 10
	overJobs := jobsBody(g, 8, 12)                          // 2 known, 2 new: over
	publishRaw(t, e, e.Names.Submit(g), overJobs)
	overNewGroup := jobsBody(h, 0, 1) // a new group, but no room for its job
	publishRaw(t, e, e.Names.Submit(h), overNewGroup)
	publishRaw(t, e, e.Names.Submit(other), jobsBody(other, 0, 10))
	publishRaw(t, e, e.Names.Submit(a), jobsBody(a, 0, 1))
	publishRaw(t, e, e.Names.Submit(b), jobsBody(b, 0, 1))
	overGroups := jobsBody(c, 0, 2)
	publishRaw(t, e, e.Names.Submit(c), overGroups)
	publishRaw(t, e, e.Names.Submit(a), jobsBody(a, 1, 3)) // an existing group: accepted
	waitSubmitDrained(t, e)

	var dls []deadLetter
	testkit.WaitFor(t, "three dead letters", 0, func() bool {
		dls = deadLetters(t, e)
		return len(dls) >= 3
	})
	want := map[string]struct {
		body  string
		needs []string
	}{
		e.Names.Submit(g): {overJobs, []string{"jobs[2], jobs[3] of group t1/g refused", "tenant t1 has 10 queued jobs and these 2 new jobs would make 12",
			"tenant.maxQueuedJobs is 10"}},
		e.Names.Submit(h): {overNewGroup, []string{"jobs[0] of group t1/h refused", "tenant t1 has 10 queued jobs", "tenant.maxQueuedJobs is 10"}},
		e.Names.Submit(c): {overGroups, []string{"jobs[0], jobs[1] of group t3/c refused", "tenant t3 has 2 active groups", "tenant.maxActiveGroups is 2"}},
	}
	if len(dls) != len(want) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), len(want), dls)
	}
	for _, dl := range dls {
		w, ok := want[dl.Subject]
		if !ok {
			t.Fatalf("dead letter of %s: %s", dl.Subject, dl.Error)
		}
		if dl.Reason != fetcher.ReasonOverQuota || dl.On != e.Names.DLQOf(dl.Subject, fetcher.ReasonOverQuota) || !strings.HasSuffix(dl.On, ".over_quota") {
			t.Errorf("%s: reason %q on %s, want over_quota on bulkaction.dlq.<tenant>.over_quota", dl.Subject, dl.Reason, dl.On)
		}
		for _, s := range w.needs {
			if !strings.Contains(dl.Error, s) {
				t.Errorf("%s: error %q does not say %q", dl.Subject, dl.Error, s)
			}
		}
		if string(dl.Message) != w.body {
			t.Errorf("%s: dead letter carries %s, want %s", dl.Subject, dl.Message, w.body)
		}
	}
	if v := testkit.Value(t, e.Metrics.DeadLetters.WithLabelValues(fetcher.ReasonOverQuota)); v != 3 {
		t.Errorf("over_quota dead letters = %v, want 3", v)
	}

	// Nothing of the refused messages is stored; everything else is.
	if info := groupInfo(t, e, g); info.Jobs != 10 {
		t.Errorf("t1/g has %d jobs, want 10", info.Jobs)
	}
	for _, gone := range []contracts.GroupRef{h, c} {
		if info := groupInfo(t, e, gone); info.State != "" {
			t.Errorf("%s exists (%s), want no group", gone, info.State)
		}
	}
	if info := groupInfo(t, e, other); info.Jobs != 10 {
		t.Errorf("t2/g has %d jobs, want 10", info.Jobs)
	}
	if info := groupInfo(t, e, a); info.Jobs != 3 {
		t.Errorf("t3/a has %d jobs, want 3", info.Jobs)
	}
	for tenant, want := range map[string][2]int64{"t1": {10, 1}, "t2": {10, 1}, "t3": {4, 2}} {
		tq, err := e.Queue.TenantQuota(ctx, tenant)
		if err != nil || tq.QueuedJobs != want[0] || tq.ActiveGroups != want[1] {
			t.Errorf("tenant %s: %+v %v, want %d queued jobs and %d active groups", tenant, tq, err, want[0], want[1])
		}
	}
	if h, err := redisq.ReadJob(ctx, e.Redis, e.Keys, g, jobID(10)); err != nil || len(h) != 0 {
		t.Errorf("a refused job was stored: %v %v", h, err)
	}
}
