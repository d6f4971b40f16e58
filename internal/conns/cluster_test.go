package conns_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/testenv"
)

// TestClusterClientFollowsAFailover: once the replica of a primary that
// died has taken over, the cluster client sends the slot's calls to it
// within seconds. A primary that died answers nothing, so the client learns
// the failover only by reading the slots again: with go-redis's default of
// once a minute, every call failed for up to a minute.
func TestClusterClientFollowsAFailover(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewRedisClusterWithReplicas(t, 3)
	cfg := &config.Config{RedisURL: "redis://" + cluster.Addrs()[0] + "/0", RedisCluster: strings.Join(cluster.Addrs(), ",")}
	rdb, err := conns.RedisClient(cfg, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const key = "{failover}:k"
	if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot, err := cluster.KeySlot(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cluster.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Nodes[owner].Kill()
	replica := owner + 3
	deadline := time.Now().Add(time.Minute)
	for {
		if o, err := cluster.SlotOwnerSeenBy(ctx, slot, replica); err == nil && o == replica {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica was not promoted within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	promoted := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Incr(cctx, key).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Since(promoted) > 15*time.Second {
			t.Fatalf("calls still fail %s after the replica took over: %v", time.Since(promoted).Round(time.Second), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
