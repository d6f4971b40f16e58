package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// A running group's progress history: one sample per ProgressMinGap at
// most, the newest first, ProgressKeep kept; none once the group has
// ended, and the history gets the group's TTL then.
func TestRecordProgress(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GroupTTL: time.Hour}, true)
	ctx := context.Background()
	g := G("p")
	enqueueN(t, q, "p", 3, contracts.PriorityNormal, 0)
	if _, err := q.Seal(ctx, g, 3); err != nil {
		t.Fatal(err)
	}
	r, err := q.Admit(ctx, 3)
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("admit: %v, %+v", err, r)
	}
	record := func(jid string) {
		t.Helper()
		if _, err := q.Record(ctx, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: jid, Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
			t.Fatal(err)
		}
	}
	record(r.Jobs[0].ID)
	t0 := b.clock.t.UnixMilli()
	if err := q.RecordProgress(ctx, g, G("unknown")); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(redisq.ProgressMinGap - time.Millisecond)
	record(r.Jobs[1].ID)
	if err := q.RecordProgress(ctx, g); err != nil { // too soon after the last: skipped
		t.Fatal(err)
	}
	got, err := q.Progress(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != (redisq.ProgressSample{AtMs: t0, Count: 1}) {
		t.Fatalf("samples = %+v, want one of 1 job at %d", got, t0)
	}
	if n := b.rdb.Exists(ctx, q.Keys().GroupProgress(G("unknown"))).Val(); n != 0 {
		t.Error("a group without meta got a progress history")
	}
	for range redisq.ProgressKeep + 5 {
		b.clock.advance(redisq.ProgressMinGap)
		if err := q.RecordProgress(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = q.Progress(ctx, g)
	if len(got) != redisq.ProgressKeep || got[0].Count != 2 || got[0].AtMs != b.clock.t.UnixMilli() || got[0].AtMs <= got[1].AtMs {
		t.Fatalf("%d samples, newest %+v; want %d, newest first, counting 2 jobs", len(got), got[0], redisq.ProgressKeep)
	}

	record(r.Jobs[2].ID) // completes the group
	b.clock.advance(time.Second)
	if err := q.RecordProgress(ctx, g); err != nil {
		t.Fatal(err)
	}
	if after, _ := q.Progress(ctx, g); len(after) != redisq.ProgressKeep || after[0] != got[0] {
		t.Error("an ended group got a progress sample")
	}
	if ttl := b.rdb.TTL(ctx, q.Keys().GroupProgress(g)).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("progress history TTL %s after the group ended, want the group TTL (1h)", ttl)
	}
}

// NextDue finds a group's earliest backed-off job among other groups' in
// due order, and, when it lies beyond NextDueScan entries, gives a lower
// bound.
func TestNextDue(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	key := q.Keys().NonReadyQueue()
	zs := make([]redis.Z, 0, redisq.NextDueScan+10)
	for i := range redisq.NextDueScan + 10 {
		zs = append(zs, redis.Z{Score: float64(1000 + i), Member: fmt.Sprintf("t:other:j%d", i)})
	}
	// "t:g" is a prefix of "t:g2"'s members: they are not g's.
	zs = append(zs, redis.Z{Score: 500, Member: "t:g2:j1"},
		redis.Z{Score: 5000, Member: "t:g:j1"}, redis.Z{Score: 4000, Member: "t:g:j2"},
		redis.Z{Score: 20000, Member: "t:far:j1"})
	if err := b.rdb.ZAdd(ctx, key, zs...).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		g       string
		due     int64
		atLeast bool
	}{
		{"g", 4000, false},
		{"g2", 500, false},
		// Beyond the scan: the due time of the 10,000th entry (g2's, g's
		// two and 9,997 others).
		{"far", 1000 + redisq.NextDueScan - 4, true},
		{"none", 1000 + redisq.NextDueScan - 4, true},
	} {
		due, atLeast, err := q.NextDue(ctx, G(c.g))
		if err != nil {
			t.Fatal(err)
		}
		if due != c.due || atLeast != c.atLeast {
			t.Errorf("%s: due %d (at least %v), want %d (%v)", c.g, due, atLeast, c.due, c.atLeast)
		}
	}
	b.rdb.Del(ctx, key)
	b.rdb.ZAdd(ctx, key, redis.Z{Score: 7, Member: "t:g:j1"}, redis.Z{Score: 9, Member: "t:x:j1"})
	if due, atLeast, _ := q.NextDue(ctx, G("none")); due != 0 || atLeast {
		t.Errorf("a group with no backed-off job in a short queue: due %d, at least %v; want 0, false", due, atLeast)
	}
}
