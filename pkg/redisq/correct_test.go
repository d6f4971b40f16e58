package redisq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// touchAfterFirst plays a park or release of group A's jobs between the
// first and the second step of its counter correction: both overwrite the
// group's currentNonReadyCount.
type touchAfterFirst struct {
	rdb   *redis.Client
	stats string
	calls atomic.Int64
	on    atomic.Bool
}

func (o *touchAfterFirst) ObserveLua(name string, _ time.Duration) {
	if name == "correct" && o.on.Load() && o.calls.Add(1) == 1 {
		o.rdb.HSet(context.Background(), o.stats, "currentNonReadyCount", 20)
	}
}

func TestCorrectCountersInBoundedSteps(t *testing.T) {
	ctx := context.Background()
	obs := &touchAfterFirst{}
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: time.Hour, Observer: obs}, true)
	obs.rdb, obs.stats = b.rdb, q.Keys().CongestionStats(G("A"))
	enqueueN(t, q, "A", 21, "", 0)
	admit(t, q, 1)
	parkAll(t, q, 20)
	drift := func() {
		b.rdb.Set(ctx, q.Keys().CongestionCount(G("A")), 57, 0)
		b.rdb.Set(ctx, q.Keys().TenantNonReady(testTenant), 3, 0)
	}
	// A's 21 job ids take several steps of 4: jobs of A entering or leaving
	// the queue meanwhile leave A, and its tenant, for the next pass.
	drift()
	obs.on.Store(true)
	if fixed, err := q.CorrectCounters(ctx, redisq.SweepChunk(4)); err != nil || fixed != 0 {
		t.Fatalf("pass with A moving: fixed %d, %v; want 0", fixed, err)
	}
	obs.on.Store(false)
	if c, _ := q.Congestion(ctx, G("A")); c.NonReadyCount != 57 || c.TenantNonReadyCount != 3 {
		t.Fatalf("counters changed by a pass that saw A move: %d, %d", c.NonReadyCount, c.TenantNonReadyCount)
	}
	// A quiet pass fixes both.
	fixed, err := q.CorrectCounters(ctx, redisq.SweepChunk(4))
	if err != nil || fixed != 2 {
		t.Fatalf("fixed %d, %v; want 2", fixed, err)
	}
	assertCountersMatchQueue(t, q, b, "A")
	if c, _ := q.Congestion(ctx, G("A")); c.TenantNonReadyCount != 20 {
		t.Fatalf("tenant counter %d, want 20", c.TenantNonReadyCount)
	}
	if fixed, _ := q.CorrectCounters(ctx, redisq.SweepChunk(4)); fixed != 0 {
		t.Fatalf("second correction fixed %d", fixed)
	}
	// In one step (the default chunk) the count is exact at once.
	drift()
	if fixed, err := q.CorrectCounters(ctx); err != nil || fixed != 2 {
		t.Fatalf("one-step pass fixed %d, %v; want 2", fixed, err)
	}
	assertCountersMatchQueue(t, q, b, "A")
}
