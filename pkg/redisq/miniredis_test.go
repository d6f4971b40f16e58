package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// The scripts run on miniredis, the in-process fallback of `bulkaction dev`
// (internal/devenv): its Lua (gopher-lua) holds about 5,000 values on the
// stack of a whole call, where Redis allows 8,000 per C call, so large
// batches are passed to commands and joined a bounded number at a time.
// One group's batch of 10,000 jobs goes through enqueue, admission, claim
// and record, every job once.
func TestScriptsRunOnMiniredisWithLargeBatches(t *testing.T) {
	m := miniredis.RunT(t)
	// gopher-lua takes seconds over a batch of 10,000 on a loaded machine:
	// past go-redis's read timeout (3 s), the client sends the script again
	// (an admission that took every job, then one that found none)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ReadTimeout: 2 * time.Minute, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	q, err := redisq.New(ctx, rdb, redisq.Config{Prefix: "mini:", GlobalLimit: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	g := contracts.GroupRef{Tenant: "t", ID: "big"}
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%05d", i), Type: "t", Payload: []byte(`{}`)}
	}
	out, err := q.EnqueueBatch(ctx, jobs)
	if err != nil {
		t.Fatalf("enqueue of %d jobs: %v", n, err)
	}
	for i, o := range out {
		if o != redisq.Added {
			t.Fatalf("job %d: %v", i, o)
		}
	}
	// the same batch again: every job a duplicate
	if out, err = q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatalf("second enqueue: %v", err)
	}
	for i, o := range out {
		if o != redisq.Duplicate {
			t.Fatalf("job %d enqueued twice: %v", i, o)
		}
	}
	if _, err := q.Seal(ctx, g, n); err != nil {
		t.Fatal(err)
	}
	var leased []redisq.LeasedJob
	// Paced admission may answer a call with no job and the time to come
	// back (a pacer's burst used up, a window's end): an admitter waits
	// that long, as the fetcher does.
	deadline := time.Now().Add(30 * time.Second)
	for len(leased) < n {
		r, err := q.Admit(ctx, n)
		if err != nil {
			t.Fatalf("admission after %d jobs: %v", len(leased), err)
		}
		js := r.Jobs
		if len(js) == 0 {
			if r.WakeMs > 0 && time.Now().Before(deadline) {
				t.Logf("after %d jobs: no job, come back in %d ms", len(leased), r.WakeMs)
				time.Sleep(time.Duration(r.WakeMs) * time.Millisecond)
				continue
			}
			r.Jobs = nil
			t.Fatalf("admission stopped after %d of %d jobs: %+v", len(leased), n, r)
		}
		leased = append(leased, js...)
	}
	if err := q.Confirm(ctx, leased...); err != nil {
		t.Fatalf("confirm of %d leases: %v", len(leased), err)
	}
	ds := make([]redisq.Delivery, len(leased))
	for i, j := range leased {
		ds[i] = redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt}
	}
	cs, err := q.ClaimBatch(ctx, ds)
	if err != nil {
		t.Fatalf("claim of %d jobs: %v", len(ds), err)
	}
	rs := make([]contracts.JobResult, 0, len(cs))
	for i, c := range cs {
		if c.Outcome != redisq.ClaimRun {
			t.Fatalf("claim %d: %v", i, c.Outcome)
		}
		rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: ds[i].JobID, Attempt: ds[i].Attempt, Status: contracts.ResultSuccess})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatalf("record of %d results: %v", len(rs), err)
	}
	st, err := q.GroupState(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if st != contracts.StateCompleted {
		t.Fatalf("group %s after every result, want COMPLETED", st)
	}
}

// Explicit destinations run on miniredis too: stored in the records, the
// tenant's bound, carried by admission.
func TestDestinationsRunOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	q, err := redisq.New(ctx, rdb, redisq.Config{Prefix: "mini:", GlobalLimit: 1_000_000,
		Adaptive: redisq.AdaptiveConfig{MaxDestinationsPerTenant: 2}})
	if err != nil {
		t.Fatal(err)
	}
	g := contracts.GroupRef{Tenant: "t", ID: "g"}
	jobs := make([]redisq.Job, 3000)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%05d", i), Type: "http", Destination: fmt.Sprintf("h%d.example", i%3)}
	}
	res, err := q.EnqueueJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups[0].DestinationsRefused != 1000 {
		t.Fatalf("refused %d, want the 1000 jobs of the third destination", res.Groups[0].DestinationsRefused)
	}
	r, err := q.Admit(ctx, len(jobs))
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, j := range r.Jobs {
		per[j.Destination]++
	}
	if per["h0.example"] != 1000 || per["h1.example"] != 1000 || per[""] != 1000 {
		t.Fatalf("admitted per destination %v", per)
	}
}
