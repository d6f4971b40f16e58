package redisq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// cancelFixture makes group "big" with 40 queued, 15 backed-off, 2 leased
// and 3 running jobs, and groups "other" (same tenant) and "x/other" with 6
// backed-off jobs each.
func cancelFixture(t *testing.T, q *redisq.Queue) {
	t.Helper()
	ctx := context.Background()
	retry := func(j redisq.LeasedJob) {
		if res, err := q.Retry(ctx, j.Group, j.ID, j.Attempt, -1, "busy"); err != nil || res.Outcome != "parked" {
			t.Fatalf("retry %s/%s: %+v %v", j.Group, j.ID, res, err)
		}
	}
	enqueueN(t, q, "other", 6, "", 0)
	enqueueN(t, q, "x/other", 6, "", 0)
	r := admit(t, q, 100)
	if len(r.Jobs) != 12 {
		t.Fatalf("fixture: admitted %d of the others' 12 jobs", len(r.Jobs))
	}
	for _, j := range r.Jobs {
		retry(j)
	}
	enqueueN(t, q, "big", 60, "", 0)
	r = admit(t, q, 20)
	if len(r.Jobs) != 20 {
		t.Fatalf("fixture: admitted %d of big's jobs, want 20", len(r.Jobs))
	}
	for _, j := range r.Jobs[:15] {
		retry(j)
	}
	for _, j := range r.Jobs[15:18] {
		if o, err := q.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || !strings.HasPrefix(string(o), "run") {
			t.Fatalf("claim %s: %v %v", j.ID, o, err)
		}
	}
}

func nonReadyOf(t *testing.T, b *testBundle, q *redisq.Queue, gk string) int {
	t.Helper()
	members, err := b.rdb.ZRange(context.Background(), q.Keys().NonReadyQueue(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, m := range members {
		if strings.HasPrefix(m, gk+":") {
			c++
		}
	}
	return c
}

// assertCancelled checks big after its cancel: every queued and backed-off
// job counted once, nothing of it left in the queues, the others untouched.
func assertCancelled(t *testing.T, q *redisq.Queue, b *testBundle, dropped int, othersParked int64) {
	t.Helper()
	ctx := context.Background()
	info, ok, err := q.Group(ctx, G("big"))
	if err != nil || !ok {
		t.Fatalf("group: %v %v", ok, err)
	}
	if info.State != contracts.StateCancelled || info.Cancelled != int64(dropped) || info.Pending != 0 || info.NonReady != 0 {
		t.Fatalf("big after cancel: state %s cancelled %d (want %d) pending %d nonReady %d",
			info.State, info.Cancelled, dropped, info.Pending, info.NonReady)
	}
	if _, ok := info.Meta["cancelSweep"]; ok {
		t.Fatal("cancelSweep left in the meta")
	}
	if n := nonReadyOf(t, b, q, "t:big"); n != 0 {
		t.Fatalf("%d jobs of big left in the non-ready queue", n)
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().CancelSweep()).Result(); n != 0 {
		t.Fatalf("cancel-sweep holds %d groups", n)
	}
	// the others keep their backed-off jobs and their counters
	for _, g := range []string{"other", "x/other"} {
		c, err := q.Congestion(ctx, G(g))
		if err != nil {
			t.Fatal(err)
		}
		gk := strings.Replace(G(g).String(), "/", ":", 1)
		if c.NonReadyCount != othersParked || int64(nonReadyOf(t, b, q, gk)) != othersParked || c.TenantNonReadyCount != othersParked {
			t.Fatalf("%s: counter %d tenant %d queue %d, want %d", g, c.NonReadyCount, c.TenantNonReadyCount, nonReadyOf(t, b, q, gk), othersParked)
		}
	}
	// Every job is counted: the running and leased ones are still to come.
	if info.Jobs-info.Cancelled != 5 {
		t.Fatalf("jobs %d cancelled %d: want 5 not cancelled (3 running, 2 leased)", info.Jobs, info.Cancelled)
	}
	// Nothing of big is admitted or released any more.
	b.clock.advance(10 * time.Minute)
	rel, err := q.Release(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range rel.Jobs {
		if j.Group == G("big") {
			t.Fatalf("released %s of the cancelled group", j.ID)
		}
	}
	if int64(len(rel.Jobs)) != 2*othersParked || rel.Cancelled != 0 {
		t.Fatalf("release: %d jobs, %d cancelled; want the others' %d, none cancelled", len(rel.Jobs), rel.Cancelled, 2*othersParked)
	}
	adm := admit(t, q, 100)
	for _, j := range adm.Jobs {
		if j.Group == G("big") {
			t.Fatalf("admitted %s of the cancelled group", j.ID)
		}
	}
	if info2, _, _ := q.Group(ctx, G("big")); info2.Cancelled != int64(dropped) {
		t.Fatalf("cancelled count moved to %d", info2.Cancelled)
	}
}

func TestCancelInBoundedSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := &scriptCounter{n: map[string]*atomic.Int64{"cancel": {}}}
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Observer: calls}, true)
	cancelFixture(t, q)
	res, err := q.Cancel(ctx, G("big"), redisq.SweepChunk(4))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != redisq.Cancelled || res.Dropped != 55 || res.Group.Cancelled != 55 || res.Group.State != contracts.StateCancelled {
		t.Fatalf("cancel: %+v", res)
	}
	// 60 ids and 40 list entries at 4 per call: many calls.
	if n := calls.n["cancel"].Load(); n < 20 {
		t.Fatalf("cancel took %d script calls, want one per 4 jobs", n)
	}
	assertCancelled(t, q, b, 55, 6)
	if again, err := q.Cancel(ctx, G("big")); err != nil || again.Outcome != redisq.CancelEnded || again.Dropped != 0 {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
}

// TestCancelCutShortIsFinishedBySweep stops a cancel after its first step
// (the process died): the group is CANCELLED at once, nothing of it is
// admitted or released meanwhile, and FinishCancels completes it with exact
// counts.
func TestCancelCutShortIsFinishedBySweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stop := &stopAfter{script: "cancel"}
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Observer: stop}, true)
	cancelFixture(t, q)
	cctx, cancel := context.WithCancel(ctx)
	stop.cancel = cancel
	if _, err := q.Cancel(cctx, G("big"), redisq.SweepChunk(5)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cut-short cancel: %v", err)
	}
	info, _, _ := q.Group(ctx, G("big"))
	if info.State != contracts.StateCancelled || info.Cancelled != 5 || info.Meta["cancelSweep"] == "" {
		t.Fatalf("after one step: state %s cancelled %d sweep %q", info.State, info.Cancelled, info.Meta["cancelSweep"])
	}
	// Meanwhile nothing of big is admitted; its due backed-off jobs are
	// counted as cancelled by release, not released.
	for _, j := range admit(t, q, 100).Jobs {
		if j.Group == G("big") {
			t.Fatalf("admitted %s of the cancelled group", j.ID)
		}
	}
	b.clock.advance(10 * time.Minute)
	rel, err := q.Release(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(rel.Jobs) != 12 || rel.Cancelled != 15 {
		t.Fatalf("release during the cancel: %d jobs (want the others' 12), %d cancelled (want big's 15)", len(rel.Jobs), rel.Cancelled)
	}
	// A counter correction leaves the tenant alone while the cancel is
	// under way (its counter may still count big's backed-off jobs), and
	// fixes it once the cancel is finished.
	if err := b.rdb.Set(ctx, q.Keys().TenantNonReady(testTenant), 99, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CorrectCounters(ctx, redisq.SweepChunk(5)); err != nil {
		t.Fatal(err)
	}
	if c, _ := q.Congestion(ctx, G("other")); c.TenantNonReadyCount != 99 {
		t.Fatalf("tenant counter during the cancel: %d, want it left alone (99)", c.TenantNonReadyCount)
	}
	done, err := q.FinishCancels(ctx, 0, redisq.SweepChunk(5))
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Group != G("big") || done[0].Dropped != 35 || done[0].Counts.Cancelled != 55 ||
		done[0].Counts.State != contracts.StateCancelled {
		t.Fatalf("finish cancels: %+v", done)
	}
	if _, err := q.CorrectCounters(ctx, redisq.SweepChunk(5)); err != nil {
		t.Fatal(err)
	}
	assertCancelled(t, q, b, 55, 0)
	if again, err := q.FinishCancels(ctx, 0); err != nil || len(again) != 0 {
		t.Fatalf("second sweep: %+v %v", again, err)
	}
}

// scriptCounter counts script calls by name.
type scriptCounter struct{ n map[string]*atomic.Int64 }

func (c *scriptCounter) ObserveLua(name string, _ time.Duration) {
	if x := c.n[name]; x != nil {
		x.Add(1)
	}
}

// stopAfter cancels a context after the first call of one script.
type stopAfter struct {
	script string
	cancel context.CancelFunc
}

func (s *stopAfter) ObserveLua(name string, _ time.Duration) {
	if name == s.script && s.cancel != nil {
		s.cancel()
	}
}

// TestScriptsStopAtTheirTimeBudget: a cancel step and a release stop once
// their time budget is spent (here at once, after the first slice of jobs)
// and leave the rest to the next call, which goes on where they stopped:
// the counts come out exact all the same.
func TestScriptsStopAtTheirTimeBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		budget   time.Duration
		min, max int64
	}{{-1, 1, 2}, {time.Microsecond, 8, 1000}} {
		calls := &scriptCounter{n: map[string]*atomic.Int64{"cancel": {}}}
		q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Observer: calls, ScriptTimeBudget: tc.budget}, true)
		cancelFixture(t, q)
		res, err := q.Cancel(ctx, G("big"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != redisq.Cancelled || res.Dropped != 55 {
			t.Fatalf("budget %s: cancel %+v", tc.budget, res)
		}
		if n := calls.n["cancel"].Load(); n < tc.min || n > tc.max {
			t.Fatalf("budget %s: %d cancel calls for 40 queued and 15 backed-off jobs, want %d to %d", tc.budget, n, tc.min, tc.max)
		}
		cfg := q.Config()
		cfg.ScriptTimeBudget = -1 // the checks release in one call
		qa, err := redisq.New(ctx, b.rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		assertCancelled(t, qa, b, 55, 6)
	}

	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, ScriptTimeBudget: time.Microsecond}, true)
	enqueueN(t, q, "A", 40, "", 0)
	r := admit(t, q, 40)
	for _, j := range r.Jobs {
		if _, err := q.Retry(ctx, j.Group, j.ID, j.Attempt, -1, "busy"); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.advance(10 * time.Minute)
	released := 0
	for calls := 1; ; calls++ {
		rel, err := q.Release(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		released += len(rel.Jobs)
		if !rel.TimeUp {
			if released != 40 || calls < 4 {
				t.Fatalf("released %d of 40 in %d calls; want all, at most a slice per call", released, calls)
			}
			break
		}
		if len(rel.Jobs) == 0 || len(rel.Jobs) >= 40 {
			t.Fatalf("call %d released %d with its time up", calls, len(rel.Jobs))
		}
	}
}
