package redisq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The congestion-aware backoff's reference cases.
func TestBackoffTable(t *testing.T) {
	base, max := time.Second, 120*time.Second
	cases := []struct {
		nonReady, rate int64
		want           time.Duration
		level          redisq.CongestionLevel
	}{
		{0, 100, 1000 * time.Millisecond, redisq.CongestionNone},
		{500, 100, 6000 * time.Millisecond, redisq.CongestionModerate},
		{1_000_000, 10, max, redisq.CongestionCritical},
		{100, 0, 101 * time.Second, redisq.CongestionCritical}, // speed 0 counts as 1
		{50, 100, time.Second, redisq.CongestionNone},
		{150, 100, 2 * time.Second, redisq.CongestionLow},
		{2000, 100, 21 * time.Second, redisq.CongestionHigh},
		{5000, 100, 51 * time.Second, redisq.CongestionCritical},
	}
	for _, c := range cases {
		got := redisq.Backoff(c.nonReady, c.rate, base, max)
		if got != c.want {
			t.Errorf("Backoff(%d, %d) = %v, want %v", c.nonReady, c.rate, got, c.want)
		}
		if l := redisq.Level(got, base); l != c.level {
			t.Errorf("Level(%v) = %s, want %s", got, l, c.level)
		}
	}
	if s := redisq.EstimateSeconds(1000, 100); s != 10 {
		t.Errorf("EstimateSeconds(1000, 100) = %d, want 10", s)
	}
}

// parkAll admits every queued job in seed mode with a used-up window, so
// each is parked with the congestion backoff.
func parkAll(t *testing.T, q *redisq.Queue, n int) *redisq.AdmitResult {
	t.Helper()
	r := admit(t, q, n)
	if r.Parked != n {
		t.Fatalf("parked %d of %d", r.Parked, n)
	}
	return r
}

func TestSeedParkingUsesCongestionBackoff(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 100, Window: time.Hour}, true)
	enqueueN(t, q, "A", 301, "", 0)
	if r := admit(t, q, 100); len(r.Jobs) != 100 {
		t.Fatalf("first window: %d", len(r.Jobs))
	}
	parkAll(t, q, 201)
	now := float64(b.clock.t.UnixMilli())
	// The first parked job (count 1) waits the base; the 201st waits
	// 1000 + floor(201/100) * 1000 ms.
	first, _ := b.rdb.ZScore(ctx, q.Keys().NonReadyQueue(), "t:A:j00100").Result()
	last, _ := b.rdb.ZScore(ctx, q.Keys().NonReadyQueue(), "t:A:j00300").Result()
	if first != now+1000 || last != now+3000 {
		t.Fatalf("due times +%v and +%v, want +1000 and +3000", first-now, last-now)
	}
	st, err := q.Congestion(ctx, G("A"))
	if err != nil {
		t.Fatal(err)
	}
	if st.NonReadyCount != 201 || st.TotalThrottleCount != 201 || st.CurrentBackoffMs != 3000 || st.Level != redisq.CongestionModerate {
		t.Fatalf("state %+v", st)
	}
	sum, err := q.SystemCongestion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.TotalNonReady != 201 || sum.WorstGroup() != G("A") || sum.WorstLevel != st.Level {
		t.Fatalf("summary %+v", sum)
	}
}

func TestCongestionDisabledUsesFixedBase(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: time.Hour, DisableCongestion: true}, true)
	enqueueN(t, q, "A", 500, "", 0)
	admit(t, q, 1)
	parkAll(t, q, 499)
	last, _ := b.rdb.ZScore(ctx, q.Keys().NonReadyQueue(), "t:A:j00499").Result()
	if due := last - float64(b.clock.t.UnixMilli()); due != 1000 {
		t.Fatalf("fixed backoff %v, want 1000", due)
	}
}

func TestReleaseOnlyDueJobsOnce(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 10, Window: time.Hour}, true)
	enqueueN(t, q, "A", 10+400, "", 0)
	enqueueN(t, q, "B", 200, "", 0)
	admit(t, q, 10)
	parkAll(t, q, 600) // due between +1s and +?s by congestion
	// Not yet due: nothing moves.
	if r, _ := q.Release(ctx, 1000); len(r.Jobs) != 0 || r.NextDueMs != b.clock.t.UnixMilli()+1000 {
		t.Fatalf("released early: %d, next %d", len(r.Jobs), r.NextDueMs)
	}
	b.clock.advance(1500 * time.Millisecond)
	var due int64
	all, _ := b.rdb.ZRangeWithScores(ctx, q.Keys().NonReadyQueue(), 0, -1).Result()
	for _, z := range all {
		if z.Score <= float64(b.clock.t.UnixMilli()) {
			due++
		}
	}
	if due == 0 || due == int64(len(all)) {
		t.Fatalf("test needs some due and some not: %d of %d", due, len(all))
	}
	// Eight releasers at once: each due job comes out exactly once. Seed
	// mode gates releases by the window's limit, which admission used up:
	// the releasers use the same keys with a limit no release reaches.
	rcfg := q.Config()
	rcfg.Mode, rcfg.GlobalLimit = redisq.ModePaced, redisq.UngatedLimit
	q, err := redisq.New(ctx, b.rdb, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := q.Release(ctx, 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(r.Jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range r.Jobs {
					seen[j.Group.ID+":"+j.ID]++
					if j.Attempt != 1 {
						t.Errorf("attempt %d", j.Attempt)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if int64(len(seen)) != due {
		t.Fatalf("released %d, due %d", len(seen), due)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s released %d times", k, n)
		}
	}
	// The counters still equal the queue's real content.
	assertCountersMatchQueue(t, q, b, "A", "B")
}

func assertCountersMatchQueue(t *testing.T, q *redisq.Queue, b *testBundle, groups ...string) {
	t.Helper()
	ctx := context.Background()
	members, _ := b.rdb.ZRange(ctx, q.Keys().NonReadyQueue(), 0, -1).Result()
	real := map[string]int64{}
	for _, m := range members {
		parts := strings.Split(m, ":") // tenant, group, job
		real[parts[1]]++
	}
	for _, g := range groups {
		st, err := q.Congestion(ctx, G(g))
		if err != nil {
			t.Fatal(err)
		}
		if st.NonReadyCount != real[g] {
			t.Fatalf("group %s counter %d, queue holds %d", g, st.NonReadyCount, real[g])
		}
	}
}

func TestCorrectCountersFixesDrift(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: time.Hour}, true)
	enqueueN(t, q, "A", 21, "", 0)
	admit(t, q, 1)
	parkAll(t, q, 20)
	b.rdb.Set(ctx, q.Keys().CongestionCount(G("A")), 57, 0) // drifted up
	b.rdb.Set(ctx, q.Keys().CongestionCount(G("Z")), 3, 0)  // a group with nothing parked
	// Z started and has not ended: it is on the watch list.
	if err := q.WatchGroups(ctx, G("Z")); err != nil {
		t.Fatal(err)
	}
	fixed, err := q.CorrectCounters(ctx)
	if err != nil || fixed != 2 {
		t.Fatalf("fixed %d, %v", fixed, err)
	}
	assertCountersMatchQueue(t, q, b, "A", "Z")
	if fixed, _ := q.CorrectCounters(ctx); fixed != 0 {
		t.Fatalf("second correction fixed %d", fixed)
	}
}

func TestRetryBacksOffAndRetryAfterWins(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 100, Window: time.Second}, true)
	enqueueN(t, q, "A", 2, "", 0)
	b.rdb.Del(ctx, q.Keys().RatePacer())
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %d", len(r.Jobs))
	}
	for _, j := range r.Jobs {
		if o, _ := q.Claim(ctx, j.Group, j.ID, j.Attempt); o != redisq.ClaimRun {
			t.Fatalf("claim %v", o)
		}
	}
	rr, err := q.Retry(ctx, G("A"), r.Jobs[0].ID, 1, -1, "boom")
	if err != nil || rr.Outcome != "parked" || rr.Delay != time.Second {
		t.Fatalf("retry: %+v %v", rr, err)
	}
	rr, _ = q.Retry(ctx, G("A"), r.Jobs[1].ID, 1, 7*time.Second, "429")
	if rr.Delay != 7*time.Second {
		t.Fatalf("retry-after ignored: %v", rr.Delay)
	}
	// A stale attempt is refused.
	if rr, _ := q.Retry(ctx, G("A"), r.Jobs[0].ID, 1, -1, ""); rr.Outcome != "stale" {
		t.Fatalf("second retry of the same attempt: %v", rr.Outcome)
	}
	b.clock.advance(time.Second)
	rel, _ := q.Release(ctx, 10)
	if len(rel.Jobs) != 1 || rel.Jobs[0].Attempt != 2 {
		t.Fatalf("release: %+v", rel.Jobs)
	}
	// The old attempt's delivery is stale now.
	if o, _ := q.Claim(ctx, G("A"), rel.Jobs[0].ID, 1); o != redisq.ClaimStale {
		t.Fatalf("claim of a stale attempt: %v", o)
	}
}

func TestSnapshotHistoryIsBounded(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{HistoryLen: 3}, true)
	enqueueN(t, q, "A", 5, "", 0)
	admit(t, q, 1)
	for i := 0; i < 5; i++ {
		if _, err := q.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h, err := q.History(ctx, 100)
	if err != nil || len(h) != 3 || h[0].ActiveTenants != 1 || h[0].ActiveGroups != 1 {
		t.Fatalf("history %d entries %+v %v", len(h), h, err)
	}
}

// TestReleaseLeavesNoCounterWithoutTTL: releasing the last backed-off job
// of a group once left its non-ready counter at 0 without a TTL, and for a
// group whose keys were cleaned up meanwhile it re-created the key for
// good. A counter that drops to 0 is now removed.
func TestReleaseLeavesNoCounterWithoutTTL(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 100, Window: time.Second}, true)
	enqueueN(t, q, "A", 2, "", 0)
	b.rdb.Del(ctx, q.Keys().RatePacer())
	r := admit(t, q, 2)
	for _, j := range r.Jobs {
		if o, _ := q.Claim(ctx, j.Group, j.ID, j.Attempt); o != redisq.ClaimRun {
			t.Fatalf("claim %v", o)
		}
		if rr, err := q.Retry(ctx, G("A"), j.ID, 1, -1, "boom"); err != nil || rr.Outcome != "parked" {
			t.Fatalf("retry: %+v %v", rr, err)
		}
	}
	count := q.Keys().CongestionCount(G("A"))
	// The group's congestion keys are cleaned up (as when it ends) while
	// its jobs are still due for release.
	b.rdb.Del(ctx, count)
	b.clock.advance(3 * time.Second)
	if rel, err := q.Release(ctx, 10); err != nil || len(rel.Jobs) != 2 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	for _, key := range []string{count, q.Keys().TenantNonReady(testTenant)} {
		if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("release left %s (TTL %v)", key, b.rdb.TTL(ctx, key).Val())
		}
	}
}

// TestRetryAfterIsCappedByMaxBackoff: a Retry-After is honoured up to
// MaxBackoff (a downstream asking for an hour does not park a job for an
// hour), and a rate-limited retry is counted as a throttle, which the next
// claim reports, not as an error.
func TestRetryAfterIsCappedByMaxBackoff(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 100, Window: time.Second, MaxBackoff: 5 * time.Second}, true)
	enqueueN(t, q, "A", 1, "", 0)
	b.rdb.Del(ctx, q.Keys().RatePacer())
	r := admit(t, q, 1)
	if o, _ := q.Claim(ctx, G("A"), r.Jobs[0].ID, 1); o != redisq.ClaimRun {
		t.Fatalf("claim %v", o)
	}
	rr, err := q.Retry(ctx, G("A"), r.Jobs[0].ID, 1, time.Hour, "429", redisq.Throttled())
	if err != nil || rr.Outcome != "parked" || rr.Delay != 5*time.Second {
		t.Fatalf("retry after an hour: %+v %v, want parked for MaxBackoff (5s)", rr, err)
	}
	b.clock.advance(5 * time.Second)
	rel, err := q.Release(ctx, 10)
	if err != nil || len(rel.Jobs) != 1 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	out, err := q.ClaimBatch(ctx, []redisq.Delivery{{Group: G("A"), JobID: rel.Jobs[0].ID, Attempt: 2}})
	if err != nil || out[0] != (redisq.Claimed{Outcome: redisq.ClaimRun, Claims: 1, Throttles: 1}) {
		t.Fatalf("claim of attempt 2: %+v %v, want one throttle", out, err)
	}
}

// TestBackoffIsPerTenant: the congestion-aware backoff divides the
// tenant's non-ready count by the tenant's share, so a tenant that splits
// its work into many groups backs off as much as one with a single group.
func TestBackoffIsPerTenant(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 20, Window: time.Hour, MaxBackoff: time.Hour}, true)
	enqueueN(t, q, "a/one", 110, "", 0)
	for g := 0; g < 10; g++ {
		enqueueN(t, q, fmt.Sprintf("b/g%d", g), 11, "", 0)
	}
	if r := admit(t, q, 220); len(r.Jobs) != 20 || r.Parked != 200 {
		t.Fatalf("admitted %d, parked %d", len(r.Jobs), r.Parked)
	}
	all, err := b.rdb.ZRangeWithScores(ctx, q.Keys().NonReadyQueue(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]float64{}
	for _, z := range all {
		tenant, _, _ := strings.Cut(z.Member.(string), ":")
		latest[tenant] = max(latest[tenant], z.Score-float64(b.clock.t.UnixMilli()))
	}
	// 100 jobs of each tenant parked at a share of 10: the last waits
	// 1s + floor(100/10)s, whatever the number of groups.
	if latest["a"] != 11_000 || latest["b"] != 11_000 {
		t.Fatalf("longest backoff per tenant %v, want 11000 ms each", latest)
	}
	st, err := q.Congestion(ctx, G("b/g0"))
	if err != nil || st.NonReadyCount != 10 || st.TenantNonReadyCount != 100 || st.RateLimitSpeed != 10 || st.CurrentBackoffMs != 11_000 {
		t.Fatalf("congestion %+v %v", st, err)
	}
}
