package redisq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// unit returns the jobs ids[from..to) of group name (see G) as one unit
// (message msg).
func unit(name string, msg, from, to int) []redisq.Job {
	jobs := make([]redisq.Job, 0, to-from)
	for i := from; i < to; i++ {
		jobs = append(jobs, redisq.Job{Group: G(name), ID: fmt.Sprintf("j%05d", i), Type: "t", Message: msg})
	}
	return jobs
}

// enqueueUnits enqueues jobs in one call and returns the outcomes as a
// string ("AAQQ") and the result.
func enqueueUnits(t *testing.T, q *redisq.Queue, jobs ...[]redisq.Job) (string, *redisq.EnqueueResult) {
	t.Helper()
	var all []redisq.Job
	for _, j := range jobs {
		all = append(all, j...)
	}
	r, err := q.EnqueueJobs(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range r.Outcomes {
		b.WriteByte(byte(o))
	}
	return b.String(), r
}

// counts returns a tenant's quota counts.
func counts(t *testing.T, q *redisq.Queue, tenant string) (queued, groups int64) {
	t.Helper()
	tq, err := q.TenantQuota(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return tq.QueuedJobs, tq.ActiveGroups
}

func wantCounts(t *testing.T, q *redisq.Queue, tenant string, queued, groups int64) {
	t.Helper()
	if gotQ, gotG := counts(t, q, tenant); gotQ != queued || gotG != groups {
		t.Fatalf("tenant %s: %d queued jobs, %d active groups; want %d, %d", tenant, gotQ, gotG, queued, groups)
	}
}

// consistent checks that the counter correction finds nothing to fix: the
// quota counts are those re-derived from the groups.
func consistent(t *testing.T, q *redisq.Queue) {
	t.Helper()
	if n, err := q.CorrectCounters(context.Background()); err != nil || n != 0 {
		t.Fatalf("correction fixed %d counters (%v), want 0", n, err)
	}
}

// finish dequeues n jobs and records them as succeeded.
func finish(t *testing.T, q *redisq.Queue, n int) {
	t.Helper()
	ctx := context.Background()
	jobs, err := q.DequeueBatch(ctx, n)
	if err != nil || len(jobs) != n {
		t.Fatalf("dequeue %d: %d jobs, %v", n, len(jobs), err)
	}
	rs := make([]contracts.JobResult, len(jobs))
	for i, j := range jobs {
		rs[i] = contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultSuccess}
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedJobsQuotaIsExactAtTheBoundary: with a quota of 10 queued jobs,
// the unit that reaches exactly 10 is accepted and the next one, of one
// job, refused whole, storing nothing; duplicates neither count nor are
// refused; jobs that finish, or a cancel, bring the count down and units
// are accepted again. Another tenant is not affected.
func TestQueuedJobsQuotaIsExactAtTheBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{TenantMaxQueuedJobs: 10}, false)

	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 0, 6)); got != "AAAAAA" {
		t.Fatalf("6 jobs: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 6, 10)); got != "AAAA" {
		t.Fatalf("4 more, reaching exactly 10: %s", got)
	}
	wantCounts(t, q, "a", 10, 1)
	got, r := enqueueUnits(t, q, unit("a/g", 0, 10, 11))
	if got != "Q" {
		t.Fatalf("an 11th job: %s, want Q", got)
	}
	ref := r.Refusals[0]
	if ref == nil || ref.Quota != redisq.QuotaQueuedJobs || ref.Limit != 10 || ref.Count != 10 || ref.Jobs != 1 || ref.Tenant != "a" {
		t.Fatalf("refusal %+v", ref)
	}
	if !strings.Contains(ref.LimitText(), "tenant.maxQueuedJobs is 10") || !strings.Contains(ref.Problem(), "has 10 queued jobs") {
		t.Errorf("refusal texts %q / %q", ref.Problem(), ref.LimitText())
	}
	if info, _, _ := q.Group(ctx, G("a/g")); info.Jobs != 10 || info.Pending != 10 {
		t.Errorf("group after the refusal: %d jobs, %d pending", info.Jobs, info.Pending)
	}
	if h, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("a/g"), "j00010"); err != nil || len(h) != 0 {
		t.Errorf("the refused job was stored: %v %v", h, err)
	}
	if ok, _ := b.rdb.SIsMember(ctx, q.Keys().GroupIDs(G("a/g")), "j00010").Result(); ok {
		t.Error("the refused job's id was stored")
	}
	// A unit of known jobs and one new job: the known ones stay duplicates,
	// the new one is refused; known jobs alone are accepted as duplicates.
	if got, r := enqueueUnits(t, q, unit("a/g", 0, 8, 11)); got != "DDQ" || r.Refusals[2] == nil || r.Refusals[0] != nil {
		t.Fatalf("2 known + 1 new: %s %v", got, r.Refusals)
	}
	if got, r := enqueueUnits(t, q, unit("a/g", 0, 0, 10)); got != strings.Repeat("D", 10) || r.Refusals != nil {
		t.Fatalf("known jobs only: %s %v", got, r.Refusals)
	}
	// A new group of the tenant is refused too (its jobs would exceed);
	// another tenant is not affected.
	if got, _ := enqueueUnits(t, q, unit("a/h", 0, 0, 1)); got != "Q" {
		t.Fatalf("a new group of a: %s", got)
	}
	if _, ok, _ := q.Group(ctx, G("a/h")); ok {
		t.Error("a refused unit created its group")
	}
	if got, _ := enqueueUnits(t, q, unit("b/g", 0, 0, 10)); got != strings.Repeat("A", 10) {
		t.Fatalf("tenant b: %s", got)
	}
	wantCounts(t, q, "a", 10, 1)
	wantCounts(t, q, "b", 10, 1)

	// 3 of a's jobs finish (b's queue is drained first, in fair order, so
	// dequeue from a only by emptying b's first).
	finish(t, q, 13)
	queuedA, _ := counts(t, q, "a")
	queuedB, _ := counts(t, q, "b")
	if queuedA+queuedB != 7 {
		t.Fatalf("after 13 jobs finished: a %d + b %d queued, want 7", queuedA, queuedB)
	}
	room := 10 - queuedA
	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 10, 10+int(room)+1)); got != strings.Repeat("Q", int(room)+1) {
		t.Fatalf("%d jobs with room for %d: %s", room+1, room, got)
	}
	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 10, 10+int(room))); got != strings.Repeat("A", int(room)) {
		t.Fatalf("%d jobs with room for %d: %s", room, room, got)
	}
	wantCounts(t, q, "a", 10, 1)
	consistent(t, q)

	// Admitted jobs count until they finish; a cancel ends the group and
	// every job of it not finished stops counting, running ones too.
	if _, err := q.DequeueBatch(ctx, 20); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, q, "a", 10, 1)
	if _, err := q.Cancel(ctx, G("a/g")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, q, "a", 0, 0)
	if got, _ := enqueueUnits(t, q, unit("a/h", 0, 0, 10)); got != strings.Repeat("A", 10) {
		t.Fatalf("after the cancel: %s", got)
	}
	consistent(t, q)
}

// TestActiveGroupsQuota: with a quota of 2 active groups, a unit that would
// create a third group is refused, while jobs for the existing groups are
// accepted; seals and pauses are never refused and their groups count; a
// cancel before the first job creates an ended group that does not count;
// groups that end (cancelled, completed) free their place.
func TestActiveGroupsQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{TenantMaxActiveGroups: 2}, false)
	for _, g := range []string{"a/g1", "a/g2"} {
		if got, _ := enqueueUnits(t, q, unit(g, 0, 0, 2)); got != "AA" {
			t.Fatalf("%s: %s", g, got)
		}
	}
	got, r := enqueueUnits(t, q, unit("a/g3", 0, 0, 2))
	if got != "GG" {
		t.Fatalf("a third group: %s", got)
	}
	if ref := r.Refusals[0]; ref == nil || ref != r.Refusals[1] || ref.Quota != redisq.QuotaActiveGroups || ref.Limit != 2 || ref.Count != 2 || ref.Jobs != 2 {
		t.Fatalf("refusal %+v", r.Refusals)
	}
	if _, ok, _ := q.Group(ctx, G("a/g3")); ok {
		t.Error("the refused group was created")
	}
	if got, _ := enqueueUnits(t, q, unit("a/g1", 0, 2, 4)); got != "AA" {
		t.Fatalf("jobs for an existing group: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("b/g1", 0, 0, 1), unit("b/g2", 0, 0, 1)); got != "AA" {
		t.Fatalf("tenant b: %s", got)
	}
	wantCounts(t, q, "a", 6, 2)
	wantCounts(t, q, "b", 2, 2)

	// A cancel before the first job: the group is created ended.
	if _, err := q.Cancel(ctx, G("a/x")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, q, "a", 6, 2)
	// A cancel frees a place: exactly one new group fits.
	if _, err := q.Cancel(ctx, G("a/g2")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, q, "a", 4, 1)
	if got, _ := enqueueUnits(t, q, unit("a/g3", 1, 0, 1), unit("a/g4", 2, 0, 1)); got != "AG" {
		t.Fatalf("one place, two new groups: %s", got)
	}
	// A seal and a pause before the first job are never refused, and count.
	if r, err := q.Seal(ctx, G("a/s"), 1); err != nil || r.Outcome != redisq.Sealed {
		t.Fatalf("seal: %+v %v", r, err)
	}
	if r, err := q.Pause(ctx, G("a/p")); err != nil || r.Outcome != redisq.Paused {
		t.Fatalf("pause: %+v %v", r, err)
	}
	wantCounts(t, q, "a", 5, 4)
	// The sealed group exists: its jobs are accepted; new groups are not.
	if got, _ := enqueueUnits(t, q, unit("a/s", 0, 0, 1)); got != "A" {
		t.Fatalf("jobs for the sealed group: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("a/g5", 0, 0, 1)); got != "G" {
		t.Fatalf("a new group over the quota: %s", got)
	}
	// A seal at 0 before any job completes the group at once: it never counts.
	if r, err := q.Seal(ctx, G("a/empty"), 0); err != nil || r.Transition != contracts.StateCompleted {
		t.Fatalf("seal at 0: %+v %v", r, err)
	}
	wantCounts(t, q, "a", 6, 4)
	consistent(t, q)

	// Groups that complete leave: a/g1 (4 jobs) and a/s (1 job) are sealed
	// and all their jobs finish; a/g3 (not sealed) and a/p (paused) stay.
	if r, err := q.Seal(ctx, G("a/g1"), 4); err != nil || r.Outcome != redisq.Sealed {
		t.Fatalf("seal a/g1: %+v %v", r, err)
	}
	finish(t, q, 8) // a's 6 jobs and b's 2
	for _, g := range []string{"a/g1", "a/s"} {
		if info, _, _ := q.Group(ctx, G(g)); info.State != contracts.StateCompleted {
			t.Fatalf("%s: %s", g, info.State)
		}
	}
	wantCounts(t, q, "a", 0, 2)
	if got, _ := enqueueUnits(t, q, unit("a/g6", 0, 0, 1)); got != "G" {
		t.Fatalf("a new group with 2 active: %s", got)
	}
	if _, err := q.Cancel(ctx, G("a/p")); err != nil {
		t.Fatal(err)
	}
	if got, _ := enqueueUnits(t, q, unit("a/g6", 0, 0, 1)); got != "A" {
		t.Fatalf("a new group with 1 active: %s", got)
	}
	wantCounts(t, q, "a", 1, 2)
	consistent(t, q)
}

// TestTenantQuotaOverrides: a tenant's own limit beats the default, 0
// meaning unlimited; QuotaDefault removes it. TenantQuotas lists the
// tenants with limits of their own.
func TestTenantQuotaOverrides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 5, TenantMaxActiveGroups: 1}, false)
	if err := q.SetTenantQuota(ctx, "vip", redisq.QuotaQueuedJobs, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.SetTenantQuota(ctx, "vip", redisq.QuotaActiveGroups, 3); err != nil {
		t.Fatal(err)
	}
	if err := q.SetTenantQuota(ctx, "small", redisq.QuotaQueuedJobs, 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := enqueueUnits(t, q, unit("vip/g1", 0, 0, 20), unit("vip/g2", 0, 0, 1), unit("vip/g3", 0, 0, 1), unit("vip/g4", 0, 0, 1)); got != strings.Repeat("A", 22)+"G" {
		t.Fatalf("vip: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("small/g", 0, 0, 3)); got != "QQQ" {
		t.Fatalf("small, 3 jobs: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("small/g", 0, 0, 2)); got != "AA" {
		t.Fatalf("small, 2 jobs: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("plain/g", 0, 0, 6)); got != "QQQQQQ" {
		t.Fatalf("plain, 6 jobs: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("plain/g", 0, 0, 5), unit("plain/h", 0, 0, 1)); got != "AAAAAG" {
		t.Fatalf("plain, 5 jobs and another group: %s", got)
	}

	list, err := q.TenantQuotas(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("TenantQuotas: %+v %v", list, err)
	}
	if v := list[1]; v.Tenant != "vip" || v.MaxQueuedJobs != 0 || !v.OwnQueuedJobs || v.MaxActiveGroups != 3 || !v.OwnActiveGroups ||
		v.QueuedJobs != 22 || v.ActiveGroups != 3 {
		t.Errorf("vip: %+v", v)
	}
	if s := list[0]; s.Tenant != "small" || s.MaxQueuedJobs != 2 || !s.OwnQueuedJobs || s.MaxActiveGroups != 1 || s.OwnActiveGroups || s.QueuedJobs != 2 {
		t.Errorf("small: %+v", s)
	}
	if p, err := q.TenantQuota(ctx, "plain"); err != nil || p.MaxQueuedJobs != 5 || p.OwnQueuedJobs || p.QueuedJobs != 5 || p.ActiveGroups != 1 {
		t.Errorf("plain: %+v %v", p, err)
	}

	// Back to the default: small may now have 5.
	if err := q.SetTenantQuota(ctx, "small", redisq.QuotaQueuedJobs, redisq.QuotaDefault); err != nil {
		t.Fatal(err)
	}
	if got, _ := enqueueUnits(t, q, unit("small/g", 0, 2, 6)); got != "QQQQ" {
		t.Fatalf("small, 2+4 with the default 5: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("small/g", 0, 2, 5)); got != "AAA" {
		t.Fatalf("small, 2+3 with the default 5: %s", got)
	}
	if list, _ := q.TenantQuotas(ctx); len(list) != 1 || list[0].Tenant != "vip" {
		t.Errorf("after the reset: %+v", list)
	}
	for _, c := range []struct {
		tenant string
		quota  redisq.Quota
		limit  int64
	}{{"a.b", redisq.QuotaQueuedJobs, 1}, {"a", "tenant.other", 1}, {"a", redisq.QuotaActiveGroups, -2}} {
		if err := q.SetTenantQuota(ctx, c.tenant, c.quota, c.limit); err == nil {
			t.Errorf("SetTenantQuota(%q, %q, %d) accepted", c.tenant, c.quota, c.limit)
		}
	}
	consistent(t, q)
}

// TestQuotaUnitsInOneCall: the units of one call are judged in order, each
// as a whole, also when the call interleaves groups.
func TestQuotaUnitsInOneCall(t *testing.T) {
	t.Parallel()
	q, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 7}, false)
	got, r := enqueueUnits(t, q, unit("a/g", 1, 0, 3), unit("a/g", 2, 3, 6), unit("a/g", 3, 6, 8), unit("a/g", 4, 8, 9))
	if got != "AAAAAAQQA" {
		t.Fatalf("units 3,3,2,1 with a quota of 7: %s", got)
	}
	if ref := r.Refusals[6]; ref == nil || ref.Count != 6 || ref.Jobs != 2 || r.Refusals[8] != nil {
		t.Fatalf("refusals %+v", r.Refusals)
	}
	// Interleaved groups: h's unit comes before g's second one and fits.
	q2, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 4}, false)
	got, r = enqueueUnits(t, q2, unit("a/g", 1, 0, 2), unit("a/h", 2, 0, 2), unit("a/g", 3, 2, 3))
	if got != "AAAAQ" {
		t.Fatalf("g, h, g with a quota of 4: %s", got)
	}
	if len(r.Groups) != 2 || r.Groups[0].Group != G("a/g") || !r.Groups[0].Created || r.Groups[0].Counts.Jobs != 2 ||
		r.Groups[1].Group != G("a/h") || len(r.Created) != 2 {
		t.Errorf("groups %+v created %v", r.Groups, r.Created)
	}
	// Another tenant's jobs between a group's do not split its call, and
	// each tenant's units are judged against its own count.
	q3, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 3}, false)
	got, r = enqueueUnits(t, q3, unit("a/g", 1, 0, 2), unit("b/g", 2, 0, 3), unit("a/g", 3, 2, 3), unit("b/g", 4, 3, 4), unit("a/g", 5, 3, 4))
	if got != "AAAAAAQQ" {
		t.Fatalf("a, b, a, b, a with a quota of 3: %s", got)
	}
	if len(r.Groups) != 2 || r.Groups[0].Counts.Jobs != 3 || r.Groups[1].Counts.Jobs != 3 {
		t.Errorf("groups %+v", r.Groups)
	}
}

// TestQuotaCountsFollowEveryPath: jobs that are admitted, backed off,
// released, retried, claimed after a cancel or recorded in batches keep
// the counts equal to what the correction derives; the correction fixes
// drifted counts and adopts a live group the counts lack (one created
// before the quotas existed).
func TestQuotaCountsFollowEveryPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 1000, Window: time.Second, TenantMaxQueuedJobs: 1000}, true)
	enqueueN(t, q, "A", 10, "", 0)
	enqueueN(t, q, "B", 10, "", 0)
	r := admit(t, q, 8)
	// 2 retried (backed off), 2 recorded, 4 left leased
	for _, j := range r.Jobs[:2] {
		if _, err := q.Retry(ctx, j.Group, j.ID, j.Attempt, -1, "boom"); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range r.Jobs[2:4] {
		if _, err := q.Record(ctx, contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultFailed}); err != nil {
			t.Fatal(err)
		}
	}
	wantCounts(t, q, testTenant, 18, 2)
	consistent(t, q)
	b.clock.advance(time.Hour)
	if _, err := q.Release(ctx, 10); err != nil {
		t.Fatal(err)
	}
	consistent(t, q)
	if _, err := q.Cancel(ctx, G("A")); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, q, testTenant, 10-countOf(r.Jobs[2:4], "B"), 1)
	// leased jobs of the cancelled group are counted cancelled at claim:
	// nothing changes for the quotas any more
	for _, j := range r.Jobs[4:] {
		if _, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil {
			t.Fatal(err)
		}
	}
	consistent(t, q)

	// Drift: a wrong counter, an ended group still listed, a live group
	// missing (as a group created before the quotas).
	k := q.Keys()
	b.rdb.Set(ctx, k.TenantQueuedJobs(testTenant), 99, 0)
	b.rdb.SAdd(ctx, k.TenantActiveGroups(testTenant), "A")
	enqueueN(t, q, "C", 3, "", 0)
	b.rdb.SRem(ctx, k.TenantActiveGroups(testTenant), "C")
	if n, err := q.CorrectCounters(ctx); err != nil || n != 3 {
		t.Fatalf("correction fixed %d (%v), want 3", n, err)
	}
	wantCounts(t, q, testTenant, 10-countOf(r.Jobs[2:4], "B")+3, 2)
	consistent(t, q)
	// enqueue adopts a live group the counts lack, with its jobs
	b.rdb.SRem(ctx, k.TenantActiveGroups(testTenant), "C")
	b.rdb.DecrBy(ctx, k.TenantQueuedJobs(testTenant), 3)
	if got, _ := enqueueUnits(t, q, unit("C", 0, 2, 5)); got != "DAA" {
		t.Fatalf("C: %s", got)
	}
	wantCounts(t, q, testTenant, 10-countOf(r.Jobs[2:4], "B")+5, 2)
	consistent(t, q)
}

func countOf(jobs []redisq.LeasedJob, gid string) int64 {
	var n int64
	for _, j := range jobs {
		if j.Group.ID == gid {
			n++
		}
	}
	return n
}

// TestRestoreJobsIgnoresTheQuotas: jobs restored by a replay (they were
// accepted before) are stored beyond both quotas and counted; a group that
// ended and a sealed total still refuse them, known jobs stay duplicates,
// and new submissions are refused by the quotas as before.
func TestRestoreJobsIgnoresTheQuotas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 4, TenantMaxActiveGroups: 1}, false)
	restore := func(jobs []redisq.Job) string {
		t.Helper()
		r, err := q.RestoreJobs(ctx, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if r.Refusals != nil {
			t.Errorf("restore: refusals %v", r.Refusals)
		}
		var b strings.Builder
		for _, o := range r.Outcomes {
			b.WriteByte(byte(o))
		}
		return b.String()
	}
	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 0, 4)); got != "AAAA" {
		t.Fatalf("4 jobs: %s", got)
	}
	if got, _ := enqueueUnits(t, q, unit("a/g", 0, 4, 6)); got != "QQ" {
		t.Fatalf("over the queued jobs: %s, want QQ", got)
	}
	if got := restore(unit("a/g", 0, 2, 6)); got != "DDAA" {
		t.Fatalf("restored over the queued jobs: %s, want DDAA", got)
	}
	if got, _ := enqueueUnits(t, q, unit("a/h", 0, 0, 1)); got != "G" {
		t.Fatalf("a new group over both quotas: %s, want G", got)
	}
	if got := restore(unit("a/h", 0, 0, 2)); got != "AA" {
		t.Fatalf("restored group over the active groups: %s, want AA", got)
	}
	wantCounts(t, q, "a", 8, 2)
	consistent(t, q)

	if _, err := q.Seal(ctx, G("a/h"), 2); err != nil {
		t.Fatal(err)
	}
	if got := restore(unit("a/h", 0, 1, 3)); got != "DS" {
		t.Fatalf("restored beyond the sealed total: %s, want DS", got)
	}
	if _, err := q.Cancel(ctx, G("a/g")); err != nil {
		t.Fatal(err)
	}
	if got := restore(unit("a/g", 0, 5, 7)); got != "DC" {
		t.Fatalf("restored into a cancelled group: %s, want DC", got)
	}
	wantCounts(t, q, "a", 2, 1)
	consistent(t, q)
}
