package redisq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func success(gid string, j int) contracts.JobResult {
	return contracts.JobResult{Tenant: testTenant, GroupID: gid, JobID: fmt.Sprintf("j%05d", j), Attempt: 1, Status: contracts.ResultSuccess}
}

func failure(gid string, j int, msg string) contracts.JobResult {
	return contracts.JobResult{Tenant: testTenant, GroupID: gid, JobID: fmt.Sprintf("j%05d", j), Attempt: 1, Status: contracts.ResultFailed, Error: msg}
}

// want is what one RecordResult of a batch must say.
type want struct {
	outcome                  redisq.RecordOutcome
	completed                bool
	state                    contracts.GroupState // "" = any state but a terminal one
	done, succeeded, failed  int64
	declared, jobs, canceled int64
}

func checkBatch(t *testing.T, rs []contracts.JobResult, got []*redisq.RecordResult, ws []want) {
	t.Helper()
	if len(got) != len(ws) {
		t.Fatalf("%d results, want %d", len(got), len(ws))
	}
	for i, w := range ws {
		g := got[i]
		c := g.Group
		ok := g.Outcome == w.outcome && g.Completed == w.completed &&
			c.Done == w.done && c.Succeeded == w.succeeded && c.Failed == w.failed &&
			c.Declared == w.declared && c.Jobs == w.jobs && c.Cancelled == w.canceled
		if w.state != "" {
			ok = ok && c.State == w.state
		} else {
			ok = ok && !c.State.Terminal()
		}
		if !ok {
			t.Errorf("result %d (%s/%s): got %s completed=%v %+v, want %+v", i, rs[i].GroupID, rs[i].JobID, g.Outcome, g.Completed, c, w)
		}
		if w.outcome != redisq.UnknownJob && g.CreatedAtMs <= 0 {
			t.Errorf("result %d: createdAt %d", i, g.CreatedAtMs)
		}
	}
}

func seal(t *testing.T, q *redisq.Queue, gid string, n int64) {
	t.Helper()
	if r, err := q.Seal(context.Background(), G(gid), n); err != nil || r.Outcome != redisq.Sealed {
		t.Fatalf("seal %s: %+v %v", gid, r, err)
	}
}

func TestRecordBatchInterleavedGroups(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "A", 3, "", 0)
	enqueueN(t, q, "B", 2, "", 0)
	enqueueN(t, q, "C", 2, "", 0)
	seal(t, q, "A", 3)
	seal(t, q, "C", 2)
	drain(t, q, 7)

	rs := []contracts.JobResult{
		success("A", 0), failure("B", 0, "x"), success("C", 0), failure("A", 1, "y"),
		success("B", 1), success("C", 1), success("A", 2),
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, done := redisq.Recorded, contracts.StateCompleted
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: 3, jobs: 3},
		{outcome: R, done: 1, failed: 1, declared: -1, jobs: 2},
		{outcome: R, done: 1, succeeded: 1, declared: 2, jobs: 2},
		{outcome: R, done: 2, succeeded: 1, failed: 1, declared: 3, jobs: 3},
		{outcome: R, done: 2, succeeded: 1, failed: 1, declared: -1, jobs: 2},
		{outcome: R, completed: true, state: done, done: 2, succeeded: 2, declared: 2, jobs: 2},
		{outcome: R, completed: true, state: done, done: 3, succeeded: 2, failed: 1, declared: 3, jobs: 3},
	})
	// The stored counters are the last ones each group reported.
	for _, gid := range []string{"A", "B", "C"} {
		info, ok, err := q.Group(ctx, G(gid))
		if err != nil || !ok {
			t.Fatalf("group %s: %v %v", gid, ok, err)
		}
		var last redisq.GroupCounts
		for i, r := range rs {
			if r.GroupID == gid {
				last = got[i].Group
			}
		}
		if info.GroupCounts != last {
			t.Errorf("group %s stored %+v, batch reported %+v", gid, info.GroupCounts, last)
		}
		if info.LastProgressAtMs <= 0 {
			t.Errorf("group %s: lastProgressAt not set", gid)
		}
	}
}

// TestRecordBatchAcrossScriptCalls records more results than one script
// call takes (512), two groups interleaved with failures and duplicates,
// so each group's counts after each result continue from one call into
// the next; the sealed group completes in the second call.
func TestRecordBatchAcrossScriptCalls(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	const n = 350
	enqueueN(t, q, "A", n, "", 0)
	enqueueN(t, q, "B", n, "", 0)
	seal(t, q, "A", n)
	drain(t, q, 2*n)

	var rs []contracts.JobResult
	var ws []want
	var a, b want
	a.declared, a.jobs, b.declared, b.jobs = n, n, -1, n
	count := func(w *want, r contracts.JobResult) want {
		w.outcome, w.completed = redisq.Recorded, false
		w.done++
		if r.Status == contracts.ResultSuccess {
			w.succeeded++
		} else {
			w.failed++
		}
		return *w
	}
	for i := 0; i < n; i++ {
		ra, rb := success("A", i), success("B", i)
		if i%7 == 3 {
			ra = failure("A", i, "x")
		}
		rs = append(rs, ra, rb)
		ws = append(ws, count(&a, ra), count(&b, rb))
		if i%50 == 10 { // a redelivered result: a duplicate, counts unchanged
			rs = append(rs, ra)
			d := a
			d.outcome = redisq.DuplicateResult
			ws = append(ws, d)
		}
	}
	ws[len(ws)-2].completed, ws[len(ws)-2].state = true, contracts.StateCompleted
	if len(rs) <= 512 {
		t.Fatalf("%d results fit one script call", len(rs))
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, rs, got, ws)
	for gid, last := range map[string]redisq.GroupCounts{"A": got[len(got)-2].Group, "B": got[len(got)-1].Group} {
		info, _, err := q.Group(ctx, G(gid))
		if err != nil {
			t.Fatal(err)
		}
		if info.GroupCounts != last {
			t.Errorf("group %s stored %+v, batch reported %+v", gid, info.GroupCounts, last)
		}
	}
}

func TestRecordBatchSameJobTwice(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "A", 3, "", 0)
	drain(t, q, 3)

	rs := []contracts.JobResult{success("A", 0), failure("A", 0, "late"), success("A", 1), success("A", 0)}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, D := redisq.Recorded, redisq.DuplicateResult
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: -1, jobs: 3},
		{outcome: D, done: 1, succeeded: 1, declared: -1, jobs: 3},
		{outcome: R, done: 2, succeeded: 2, declared: -1, jobs: 3},
		{outcome: D, done: 2, succeeded: 2, declared: -1, jobs: 3},
	})
	if got[1].CreatedAtMs != got[0].CreatedAtMs || got[3].CreatedAtMs != got[0].CreatedAtMs {
		t.Errorf("duplicates report createdAt %d and %d, want %d", got[1].CreatedAtMs, got[3].CreatedAtMs, got[0].CreatedAtMs)
	}
	h, _ := b.rdb.HGetAll(ctx, q.Keys().Job(G("A"), "j00000")).Result()
	if h["status"] != "SUCCESS" || h["error"] != "" {
		t.Errorf("the duplicate changed the job: %v", h)
	}
	info, _, _ := q.Group(ctx, G("A"))
	if info.Done != 2 || info.Succeeded != 2 || info.Failed != 0 {
		t.Errorf("stored counts %+v", info.GroupCounts)
	}
	// The same results again are all duplicates.
	again, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again {
		if r.Outcome != D || r.Group.Done != 2 {
			t.Errorf("redelivered result %d: %s %+v", i, r.Outcome, r.Group)
		}
	}
}

func TestRecordBatchCompletesGroupInTheMiddle(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	enqueueN(t, q, "A", 2, "", 0)
	enqueueN(t, q, "B", 3, "", 0)
	seal(t, q, "A", 2)
	admit(t, q, 5)
	if ok, _ := b.rdb.SIsMember(ctx, q.Keys().ActiveTenants(), testTenant).Result(); !ok {
		t.Fatal("the tenant is not in the active set after admission")
	}
	if err := b.rdb.HSet(ctx, q.Keys().CongestionStats(G("A")), "totalThrottleCount", 4).Err(); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(time.Second)

	rs := []contracts.JobResult{
		success("A", 0), success("B", 0), failure("A", 1, "boom"), success("A", 1), success("B", 1), success("A", 0),
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, D, done := redisq.Recorded, redisq.DuplicateResult, contracts.StateCompleted
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: 2, jobs: 2},
		{outcome: R, done: 1, succeeded: 1, declared: -1, jobs: 3},
		{outcome: R, completed: true, state: done, done: 2, succeeded: 1, failed: 1, declared: 2, jobs: 2},
		{outcome: D, state: done, done: 2, succeeded: 1, failed: 1, declared: 2, jobs: 2},
		{outcome: R, done: 2, succeeded: 2, declared: -1, jobs: 3},
		{outcome: D, state: done, done: 2, succeeded: 1, failed: 1, declared: 2, jobs: 2},
	})

	info, _, _ := q.Group(ctx, G("A"))
	now := b.clock.t.UnixMilli()
	if info.State != done || info.FinishedAtMs != now || info.LastProgressAtMs != now {
		t.Errorf("A after completion: %+v finishedAt %d lastProgressAt %d, want %d", info.GroupCounts, info.FinishedAtMs, info.LastProgressAtMs, now)
	}
	// The congestion statistics stay, with the group's TTL, so an ended
	// group's throttle count can still be read.
	if n, _ := b.rdb.HGet(ctx, q.Keys().CongestionStats(G("A")), "totalThrottleCount").Int64(); n != 4 {
		t.Errorf("A's throttle count after completion = %d, want 4", n)
	}
	if d, _ := b.rdb.TTL(ctx, q.Keys().CongestionStats(G("A"))).Result(); d <= 0 {
		t.Errorf("A's congestion stats have TTL %s, want the group's", d)
	}
	if ok, _ := b.rdb.SIsMember(ctx, q.Keys().ActiveTenants(), testTenant).Result(); !ok {
		t.Error("the tenant left the active set (tenants leave it only when they stop asking for capacity)")
	}
	// A group completed by an earlier batch: its late result is a duplicate
	// that reports the completed group and completes nothing.
	late, err := q.RecordBatch(ctx, []contracts.JobResult{success("A", 1), success("B", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if late[0].Outcome != D || late[0].Completed || late[0].Group.State != done || late[0].Group.Done != 2 {
		t.Errorf("late duplicate: %+v", late[0])
	}
	if late[1].Outcome != R || late[1].Completed || late[1].Group.Done != 3 {
		t.Errorf("B's last result: %+v", late[1])
	}
}

func TestRecordBatchUnknownJobs(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "A", 2, "", 0)
	drain(t, q, 2)

	rs := []contracts.JobResult{
		success("A", 0), success("A", 99), success("nobody", 0), success("A", 1), success("A", 99),
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, U := redisq.Recorded, redisq.UnknownJob
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: -1, jobs: 2},
		{outcome: U, done: 1, succeeded: 1, declared: -1, jobs: 2},
		{outcome: U, declared: -1},
		{outcome: R, done: 2, succeeded: 2, declared: -1, jobs: 2},
		{outcome: U, done: 2, succeeded: 2, declared: -1, jobs: 2},
	})
	for i, r := range got {
		if r.Outcome == U && r.CreatedAtMs != 0 {
			t.Errorf("unknown result %d: createdAt %d", i, r.CreatedAtMs)
		}
	}
	if got[2].Group.State != "" {
		t.Errorf("a group that does not exist has state %q", got[2].Group.State)
	}
	n, err := b.rdb.Exists(ctx, q.Keys().GroupMeta(G("nobody")), q.Keys().Job(G("nobody"), "j00000"), q.Keys().GroupQueued(G("nobody")),
		q.Keys().Job(G("A"), "j00099")).Result()
	if err != nil || n != 0 {
		t.Errorf("unknown results created %d keys (%v)", n, err)
	}
}

func TestRecordBatchStoresResultOnJob(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{JobTTL: time.Hour, GroupTTL: 2 * time.Hour}, true)
	enqueueN(t, q, "A", 3, "", 0)
	enqueueN(t, q, "B", 1, "", 0)
	seal(t, q, "A", 3)
	drain(t, q, 4)
	rs := []contracts.JobResult{failure("A", 0, "upstream said: 503 {\"x\": 1}"), failure("A", 1, ""), success("B", 0), success("A", 2)}
	rs[1].Attempt = 3
	// j00001 runs its third attempt: a result is recorded only for the
	// job's current attempt (fencing, docs/ARCHITECTURE.md §6.4)
	b.rdb.HSet(ctx, q.Keys().Job(G("A"), "j00001"), "attempt", 3)
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if !got[3].Completed || got[2].Completed {
		t.Fatalf("completions: %+v", got)
	}
	now := strconv.FormatInt(b.clock.t.UnixMilli(), 10)
	for i, r := range rs {
		h, _ := b.rdb.HGetAll(ctx, q.Keys().Job(G(r.GroupID), r.JobID)).Result()
		if h["status"] != string(r.Status) || h["finishedAt"] != now || h["resultAttempt"] != strconv.Itoa(r.Attempt) {
			t.Errorf("job %d: %v", i, h)
		}
		if e, ok := h["error"]; ok != (r.Error != "") || e != r.Error {
			t.Errorf("job %d: error %q (set %v), want %q", i, e, ok, r.Error)
		}
		ttl, _ := b.rdb.TTL(ctx, q.Keys().Job(G(r.GroupID), r.JobID)).Result()
		if ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("job %d: TTL %s, want 1h", i, ttl)
		}
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupMeta(G("A"))).Result(); ttl <= 119*time.Minute || ttl > 2*time.Hour {
		t.Errorf("completed group's meta TTL %s, want 2h", ttl)
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupMeta(G("B"))).Result(); ttl != -1 {
		t.Errorf("running group's meta TTL %s, want none", ttl)
	}
}

func TestRecordBatchFailingChangesNothing(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "A", 3, "", 0)
	seal(t, q, "A", 3)
	drain(t, q, 3)
	// j00001's job hash is broken: reading it fails inside the script.
	key := q.Keys().Job(G("A"), "j00001")
	dump, err := b.rdb.Dump(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Set(ctx, key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rs := []contracts.JobResult{success("A", 0), success("A", 1), success("A", 2)}
	if _, err := q.RecordBatch(ctx, rs); err == nil {
		t.Fatal("recording a broken job did not fail")
	}
	// The results before the broken one were not recorded either, so the
	// whole batch can be recorded again.
	if st, _ := b.rdb.HGet(ctx, q.Keys().Job(G("A"), "j00000"), "status").Result(); st == "SUCCESS" {
		t.Error("a failed call marked j00000 terminal")
	}
	if info, _, _ := q.Group(ctx, G("A")); info.Done != 0 || info.LastProgressAtMs != 0 {
		t.Errorf("a failed call changed the group: %+v", info)
	}
	if err := b.rdb.RestoreReplace(ctx, key, 0, dump).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, done := redisq.Recorded, contracts.StateCompleted
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: 3, jobs: 3},
		{outcome: R, done: 2, succeeded: 2, declared: 3, jobs: 3},
		{outcome: R, completed: true, state: done, done: 3, succeeded: 3, declared: 3, jobs: 3},
	})
}

func TestRecordBatchUpdatesThrottleAverageOnce(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	enqueueN(t, q, "A", 3, "", 0)
	drain(t, q, 3)
	stats := q.Keys().CongestionStats(G("A"))
	b.rdb.HSet(ctx, stats, "totalThrottleCount", 7)
	if _, err := q.Record(ctx, success("A", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.RecordBatch(ctx, []contracts.JobResult{success("A", 1), success("A", 0), success("A", 2), success("A", 2)}); err != nil {
		t.Fatal(err)
	}
	if avg, _ := b.rdb.HGet(ctx, stats, "avgThrottlePerJob").Result(); avg != "2.33" {
		t.Errorf("avgThrottlePerJob %q, want 2.33 (7 throttles / 3 done)", avg)
	}
}

// TestRecordBatchMatchesOneByOne records one long random sequence (more than
// one script call's worth, with duplicates, unknown jobs, failures, sealed
// and unsealed groups and a cancelled one) as one batch on one queue and one
// result at a time on another: every reply and the stored state agree.
func TestRecordBatchMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	sizes := map[string]int{"A": 400, "B": 300, "C": 250, "D": 120}
	sealed := map[string]bool{"A": true, "B": true, "D": true}
	type env struct {
		q *redisq.Queue
		b *testBundle
	}
	var envs []env
	for range 2 {
		q, b := setup(t, redisq.Config{JobTTL: time.Hour, GroupTTL: time.Hour}, true)
		for _, gid := range []string{"A", "B", "C", "D"} {
			enqueueN(t, q, gid, sizes[gid], "", 0)
			if sealed[gid] {
				seal(t, q, gid, int64(sizes[gid]))
			}
			b.rdb.HSet(ctx, q.Keys().CongestionStats(G(gid)), "totalThrottleCount", 5)
		}
		if _, err := q.DequeueBatch(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		if r, err := q.Cancel(ctx, G("D")); err != nil || r.Outcome != redisq.Cancelled {
			t.Fatalf("cancel: %+v %v", r, err)
		}
		// the rest of A, B and C: a result counts only for a job handed out
		if _, err := q.DequeueBatch(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env{q, b})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var rs []contracts.JobResult
	for _, gid := range []string{"A", "B", "C", "D"} {
		for j := range sizes[gid] {
			if rng.IntN(5) == 0 {
				rs = append(rs, failure(gid, j, fmt.Sprintf("e%d", j)))
			} else {
				rs = append(rs, success(gid, j))
			}
		}
	}
	rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	for range 150 { // redeliveries and strays, anywhere
		r := rs[rng.IntN(len(rs))]
		if rng.IntN(4) == 0 {
			r.JobID = "stray"
		}
		i := rng.IntN(len(rs) + 1)
		rs = append(rs[:i], append([]contracts.JobResult{r}, rs[i:]...)...)
	}
	if len(rs) <= 1024 {
		t.Fatalf("only %d results: the batch should need several script calls", len(rs))
	}

	batch, err := envs[0].q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	completions := 0
	for i, r := range rs {
		one, err := envs[1].q.Record(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(batch[i], one) {
			t.Fatalf("result %d (%s/%s): batch %+v, one by one %+v", i, r.GroupID, r.JobID, batch[i], one)
		}
		if one.Completed {
			completions++
		}
	}
	if completions != 2 {
		t.Errorf("%d completions, want 2 (A and B)", completions)
	}
	keys := func(k redisq.Keys, gid string) []string {
		return []string{k.GroupMeta(G(gid)), k.CongestionStats(G(gid))}
	}
	for _, gid := range []string{"A", "B", "C", "D"} {
		for i, k := range keys(envs[0].q.Keys(), gid) {
			h0, _ := envs[0].b.rdb.HGetAll(ctx, k).Result()
			h1, _ := envs[1].b.rdb.HGetAll(ctx, keys(envs[1].q.Keys(), gid)[i]).Result()
			if !reflect.DeepEqual(h0, h1) {
				t.Errorf("%s: batch stored %v, one by one %v", k, h0, h1)
			}
		}
	}
	for _, r := range rs[:200] {
		h0, _ := envs[0].b.rdb.HGetAll(ctx, envs[0].q.Keys().Job(G(r.GroupID), r.JobID)).Result()
		h1, _ := envs[1].b.rdb.HGetAll(ctx, envs[1].q.Keys().Job(G(r.GroupID), r.JobID)).Result()
		if !reflect.DeepEqual(h0, h1) {
			t.Errorf("job %s/%s: batch stored %v, one by one %v", r.GroupID, r.JobID, h0, h1)
		}
	}
}

// TestDropSucceededJobs: with Config.DropSucceededJobs a succeeded job's
// hash goes when its result is recorded; a failed one is kept. The group's
// counts stay exact: a second result of the dropped job is a duplicate, and
// so is the job sent again.
func TestDropSucceededJobs(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{JobTTL: time.Hour, DropSucceededJobs: true}, true)
	enqueueN(t, q, "A", 3, "", 0)
	seal(t, q, "A", 3)
	drain(t, q, 3)
	rs := []contracts.JobResult{success("A", 0), failure("A", 1, "no"), success("A", 0)}
	got, err := q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	R, D := redisq.Recorded, redisq.DuplicateResult
	checkBatch(t, rs, got, []want{
		{outcome: R, done: 1, succeeded: 1, declared: 3, jobs: 3},
		{outcome: R, done: 2, succeeded: 1, failed: 1, declared: 3, jobs: 3},
		{outcome: D, done: 2, succeeded: 1, failed: 1, declared: 3, jobs: 3},
	})
	if n, _ := b.rdb.Exists(ctx, q.Keys().Job(G("A"), "j00000")).Result(); n != 0 {
		t.Errorf("a succeeded job's hash was kept")
	}
	h, _ := b.rdb.HGetAll(ctx, q.Keys().Job(G("A"), "j00001")).Result()
	if h["status"] != string(contracts.ResultFailed) || h["error"] != "no" {
		t.Errorf("the failed job: %v", h)
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().Job(G("A"), "j00001")).Result(); ttl <= 59*time.Minute {
		t.Errorf("the failed job's TTL %s, want 1h", ttl)
	}

	// a later result of the dropped job, in another batch: a duplicate, not unknown
	rs = []contracts.JobResult{success("A", 0), success("A", 2)}
	got, err = q.RecordBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Outcome != D || got[0].Group.Done != 2 {
		t.Errorf("a second result of a dropped job: %s, done %d; want duplicate, 2", got[0].Outcome, got[0].Group.Done)
	}
	if got[1].Outcome != R || !got[1].Completed || got[1].Group.Succeeded != 2 || got[1].Group.Failed != 1 {
		t.Errorf("the last result: %s completed=%v %+v", got[1].Outcome, got[1].Completed, got[1].Group)
	}
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("A"), ID: "j00000", Type: "t", Payload: []byte(`{}`)}})
	if err != nil || out[0] == redisq.Added {
		t.Errorf("the dropped job sent again: %v %v, want it refused as known", out, err)
	}
}
