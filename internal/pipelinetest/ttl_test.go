package pipelinetest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testenv"
)

func TestGroupKeysWithoutTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.Redis(t)
	rdb, p := env.Client, env.Prefix
	set := func(key string, ttl time.Duration, fields ...any) {
		t.Helper()
		if err := rdb.HSet(ctx, p+key, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if ttl > 0 {
			rdb.Expire(ctx, p+key, ttl)
		}
	}
	// An ended group: its meta has a TTL, one job hash and its stats do not.
	set("group:t:done:meta", time.Hour, "status", "COMPLETED")
	set("job:t:done:j1", time.Hour, "status", "SUCCESS")
	set("job:t:done:j2", 0, "status", "SUCCESS")
	set("congestion:t:done:stats", 0, "totalThrottleCount", 1)
	// A cancelled group whose meta has no TTL.
	set("group:t:gone:meta", 0, "status", "CANCELLED")
	// An abandoned group with a key left out.
	set("group:t:idle:meta", time.Hour, "status", "RUNNING", "abandonedAt", 1)
	rdb.SAdd(ctx, p+"group:t:idle:ids", "j1")
	// A live group: nothing is reported.
	set("group:t:live:meta", 0, "status", "RUNNING")
	set("job:t:live:j1", 0, "status", "QUEUED")
	// A job hash whose group's meta is gone.
	set("job:t:orphan:j1", 0, "status", "LEASED")
	// Shared keys and indexes are not group keys.
	rdb.ZAdd(ctx, p+"group-index", redisZ("t:done"))
	rdb.RPush(ctx, p+"congestion:history", "{}")

	leaked, err := pipelinetest.GroupKeysWithoutTTL(ctx, rdb, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range leaked {
		got = append(got, l.Key[len(p):]+" "+l.Why)
	}
	want := []string{"congestion:t:done:stats COMPLETED", "group:t:gone:meta CANCELLED", "group:t:idle:ids abandoned",
		"job:t:done:j2 COMPLETED", "job:t:orphan:j1 no meta"}
	if !slices.Equal(got, want) {
		t.Fatalf("leaked keys\n got %q\nwant %q", got, want)
	}
}

func redisZ(member string) redis.Z { return redis.Z{Score: 1, Member: member} }
