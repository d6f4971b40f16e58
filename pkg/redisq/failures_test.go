package redisq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// failJobs enqueues n jobs j00000.. of group g, dequeues them all and
// records a FAILED result for those with fail(i), a SUCCESS for the others,
// in batches of at most batch results.
func failJobs(t *testing.T, q *redisq.Queue, g contracts.GroupRef, n, batch int, fail func(i int) bool) {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%05d", i), Type: "mail", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for left := n; left > 0; {
		js, err := q.DequeueBatch(ctx, left)
		if err != nil || len(js) == 0 {
			t.Fatalf("dequeue: %d jobs, %v", len(js), err)
		}
		left -= len(js)
	}
	for start := 0; start < n; start += batch {
		var rs []contracts.JobResult
		for i := start; i < min(start+batch, n); i++ {
			r := contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: fmt.Sprintf("j%05d", i), Attempt: 1, Status: contracts.ResultSuccess}
			if fail(i) {
				r.Status, r.Error = contracts.ResultFailed, fmt.Sprintf("error %d", i)
			}
			rs = append(rs, r)
		}
		if _, err := q.RecordBatch(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
}

// allFailures reads every page of a group's failures index.
func allFailures(t *testing.T, q *redisq.Queue, g contracts.GroupRef, limit int) (fs []redisq.Failure, pages int) {
	t.Helper()
	after := ""
	for {
		page, next, err := q.Failures(context.Background(), g, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d entries, limit %d", len(page), limit)
		}
		fs = append(fs, page...)
		pages++
		if next == "" {
			return fs, pages
		}
		after = next
	}
}

func TestFailuresNewestFirstPaginated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	g := G("A")
	// 50 failures (every third job of 150) in batches of 7: several share a
	// millisecond, as the results of one batch do
	failJobs(t, q, g, 150, 7, func(i int) bool { return i%3 == 0 })
	if n, err := q.FailuresKept(ctx, g); err != nil || n != 50 {
		t.Fatalf("FailuresKept = %d %v, want 50", n, err)
	}
	for _, limit := range []int{1, 7, 50, 1000} {
		fs, pages := allFailures(t, q, g, limit)
		if want := (50 + limit - 1) / limit; pages != want {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, want)
		}
		if len(fs) != 50 {
			t.Fatalf("limit %d: %d failures, want 50", limit, len(fs))
		}
		seen := map[string]bool{}
		for k, f := range fs {
			if seen[f.JobID] {
				t.Fatalf("limit %d: %s listed twice", limit, f.JobID)
			}
			seen[f.JobID] = true
			var i int
			fmt.Sscanf(f.JobID, "j%d", &i)
			if i%3 != 0 || f.Type != "mail" || f.Attempts != 1 || f.Error != fmt.Sprintf("error %d", i) ||
				string(f.Payload) != fmt.Sprintf(`{"i":%d}`, i) || !f.FinishedAt.Equal(b.clock.t) {
				t.Fatalf("limit %d: entry %d = %+v", limit, k, f)
			}
		}
	}
	// newest first: failures recorded later come first
	b.clock.advance(time.Second)
	failJobs(t, q, G("A2"), 1, 1, func(int) bool { return true }) // another group: not listed here
	late := time.UnixMilli(b.clock.t.UnixMilli())
	rec(t, q, g, "late")
	fs, _ := allFailures(t, q, g, 10)
	if len(fs) != 51 || fs[0].JobID != "late" || !fs[0].FinishedAt.Equal(late) {
		t.Fatalf("newest entry %+v of %d, want late at %s", fs[0], len(fs), late)
	}
}

// rec adds one failed job to g and records its failure at the clock's time.
func rec(t *testing.T, q *redisq.Queue, g contracts.GroupRef, jid string) {
	t.Helper()
	ctx := context.Background()
	if _, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: g, ID: jid, Type: "mail"}}); err != nil {
		t.Fatal(err)
	}
	for {
		j, err := q.Dequeue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if j.Group == g && j.ID == jid {
			break
		}
	}
	if r, err := q.Record(ctx, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: jid, Attempt: 1,
		Status: contracts.ResultFailed, Error: "late"}); err != nil || r.Outcome != redisq.Recorded {
		t.Fatalf("record %s: %+v %v", jid, r, err)
	}
}

// TestFailuresCursorSurvivesNewFailures: failures recorded between two
// pages (newer, at the front) neither repeat entries nor hide any.
func TestFailuresCursorSurvivesNewFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	g := G("A")
	failJobs(t, q, g, 30, 30, func(i int) bool { return i < 20 })
	page1, next, err := q.Failures(ctx, g, "", 8)
	if err != nil || len(page1) != 8 || next == "" {
		t.Fatalf("page 1: %d entries, next %q, %v", len(page1), next, err)
	}
	b.clock.advance(time.Millisecond)
	for i := range 5 {
		rec(t, q, g, fmt.Sprintf("new%d", i))
	}
	rest, _ := allFailuresFrom(t, q, g, next, 8)
	seen := map[string]bool{}
	for _, f := range append(page1, rest...) {
		if seen[f.JobID] {
			t.Fatalf("%s listed twice", f.JobID)
		}
		seen[f.JobID] = true
	}
	if len(seen) != 20 {
		t.Fatalf("listed %d of the 20 failures before the first page", len(seen))
	}
	for id := range seen {
		if len(id) > 3 && id[:3] == "new" {
			t.Fatalf("a failure newer than the first page (%s) appeared in a later page", id)
		}
	}
	// bad cursors and limits
	for _, c := range []string{"!!", "bm86cGU"} { // not base64; "no:pe" is no job id
		if _, _, err := q.Failures(ctx, g, c, 5); !errors.Is(err, redisq.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
	for _, l := range []int{0, -1, redisq.MaxFailuresPage + 1} {
		if _, _, err := q.Failures(ctx, g, "", l); err == nil {
			t.Errorf("limit %d accepted", l)
		}
	}
}

func allFailuresFrom(t *testing.T, q *redisq.Queue, g contracts.GroupRef, after string, limit int) ([]redisq.Failure, string) {
	t.Helper()
	var fs []redisq.Failure
	for after != "" {
		page, next, err := q.Failures(context.Background(), g, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, page...)
		after = next
	}
	return fs, after
}

// TestFailuresTrimmedToNewest: the index keeps the newest MaxFailuresKept
// failures; the group's counts still count every failure.
func TestFailuresTrimmedToNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	g := G("A")
	const n = redisq.MaxFailuresKept + 37
	// one batch per 1000 results, each a millisecond later than the last
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%05d", i), Type: "mail"}
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if js, err := q.DequeueBatch(ctx, n); err != nil || len(js) != n {
		t.Fatalf("dequeue: %d %v", len(js), err)
	}
	for start := 0; start < n; start += 1000 {
		var rs []contracts.JobResult
		for i := start; i < min(start+1000, n); i++ {
			rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: fmt.Sprintf("j%05d", i), Attempt: 1, Status: contracts.ResultFailed})
		}
		if _, err := q.RecordBatch(ctx, rs); err != nil {
			t.Fatal(err)
		}
		b.clock.advance(time.Millisecond)
	}
	if kept, err := q.FailuresKept(ctx, g); err != nil || kept != redisq.MaxFailuresKept {
		t.Fatalf("FailuresKept = %d %v, want %d", kept, err, redisq.MaxFailuresKept)
	}
	info, _, _ := q.Group(ctx, G("A"))
	if info.Failed != n {
		t.Fatalf("group counts %d failed, want %d", info.Failed, n)
	}
	fs, pages := allFailures(t, q, g, redisq.MaxFailuresPage)
	if len(fs) != redisq.MaxFailuresKept || pages != redisq.MaxFailuresKept/redisq.MaxFailuresPage {
		t.Fatalf("listed %d in %d pages, want %d", len(fs), pages, redisq.MaxFailuresKept)
	}
	for _, f := range fs {
		var i int
		fmt.Sscanf(f.JobID, "j%d", &i)
		if i < 37 {
			t.Fatalf("%s kept: the oldest 37 should be trimmed", f.JobID)
		}
	}
}

// TestFailuresIsolatedAndExpiring: tenants and groups have their own
// indexes (the same groupId in two tenants too); an ended group's index
// expires with its other keys; a listed job whose hash expired is returned
// with what is known.
func TestFailuresIsolatedAndExpiring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GroupTTL: time.Hour}, false)
	ga, gb, gc := G("acme/g"), G("globex/g"), G("acme/other")
	failJobs(t, q, ga, 10, 10, func(i int) bool { return i < 4 })
	failJobs(t, q, gb, 10, 10, func(i int) bool { return i < 6 })
	failJobs(t, q, gc, 10, 10, func(int) bool { return false })
	for g, want := range map[contracts.GroupRef]int{ga: 4, gb: 6, gc: 0} {
		fs, _ := allFailures(t, q, g, 100)
		if len(fs) != want {
			t.Errorf("%s lists %d failures, want %d", g, len(fs), want)
		}
		for _, f := range fs {
			if f.Error == "" {
				t.Errorf("%s: %+v", g, f)
			}
		}
	}
	if n, _ := b.rdb.Exists(ctx, q.Keys().GroupFailures(gc)).Result(); n != 0 {
		t.Errorf("a group without failures has an index")
	}
	// a running group's index does not expire; an ended one's does with the group
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupFailures(ga)).Result(); ttl != -1 {
		t.Errorf("running group's index TTL %s, want none", ttl)
	}
	if _, err := q.Seal(ctx, ga, 10); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupFailures(ga)).Result(); ttl <= 59*time.Minute {
		t.Errorf("completed group's index TTL %s, want 1h", ttl)
	}
	if _, err := q.Cancel(ctx, gb); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupFailures(gb)).Result(); ttl <= 59*time.Minute {
		t.Errorf("cancelled group's index TTL %s, want 1h", ttl)
	}
	// a job's hash expires (JOB_TTL) before the index does
	b.rdb.Del(ctx, q.Keys().Job(ga, "j00002"))
	fs, _ := allFailures(t, q, ga, 100)
	var found bool
	for _, f := range fs {
		if f.JobID == "j00002" {
			found = true
			if f.FinishedAt.IsZero() || f.Type != "" || f.Error != "" || f.Payload != nil || f.Attempts != 0 {
				t.Errorf("entry of an expired job: %+v", f)
			}
		}
	}
	if !found || len(fs) != 4 {
		t.Errorf("entry of an expired job missing: %+v", fs)
	}
	// a job of a cancelled group that fails afterwards is listed, and its
	// index keeps the group's TTL
	gd := G("acme/d")
	failJobs(t, q, gd, 1, 1, func(int) bool { return false })
	// (a second job, leased when the group is cancelled, fails later)
	if _, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: gd, ID: "late", Type: "mail"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.DequeueBatch(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, gd); err != nil {
		t.Fatal(err)
	}
	if r, err := q.Record(ctx, contracts.JobResult{Tenant: "acme", GroupID: "d", JobID: "late", Attempt: 1, Status: contracts.ResultFailed, Error: "x"}); err != nil || r.Outcome != redisq.Recorded {
		t.Fatalf("late failure: %+v %v", r, err)
	}
	if ttl, _ := b.rdb.TTL(ctx, q.Keys().GroupFailures(gd)).Result(); ttl <= 59*time.Minute {
		t.Errorf("index of a cancelled group's late failure: TTL %s, want 1h", ttl)
	}
}

// TestFailuresKeyIsAUserKey: the failures index of no group equals another
// key of the system (as TestNoUserKeyCollidesWithASystemKey for the rest).
func TestFailuresKeyIsAUserKey(t *testing.T) {
	k := redisq.NewKeys("p:")
	ids := []string{"failures", "meta", "jobs", "ids", "progress", "g"}
	seen := map[string]string{}
	for _, tenant := range ids {
		for _, gid := range ids {
			g := contracts.GroupRef{Tenant: tenant, ID: gid}
			for name, key := range map[string]string{
				"GroupFailures": k.GroupFailures(g), "GroupMeta": k.GroupMeta(g), "GroupJobs": k.GroupJobs(g),
				"GroupIDs": k.GroupIDs(g), "GroupProgress": k.GroupProgress(g),
			} {
				what := name + "(" + g.String() + ")"
				if o, ok := seen[key]; ok {
					t.Errorf("%s = %q, the key of %s", what, key, o)
				}
				seen[key] = what
			}
			for _, jid := range ids {
				if o, ok := seen[k.Job(g, jid)]; ok {
					t.Errorf("Job(%s,%s) = the key of %s", g, jid, o)
				}
			}
		}
	}
}
