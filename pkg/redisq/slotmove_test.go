package redisq_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestScriptsWaitForAMovingSlot: while the installation's slot is moving
// between two Redis Cluster primaries, no script writes anything (a script
// stopped half way would leave half its writes): enqueue, seal and
// admission calls wait, the keys stay as they were, and once the slot is
// stable again each call completes once.
func TestScriptsWaitForAMovingSlot(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewRedisCluster(t, 2)
	rdb := cluster.Client(t)
	ctx := context.Background()
	const prefix = "{mv}:"
	q, err := redisq.New(ctx, rdb, redisq.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	g := contracts.Group("acme", "g")
	var jobs []redisq.Job
	for i := range 20 {
		jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("j%02d", i), Type: "noop", Payload: []byte(`{}`)})
	}
	if _, err := q.EnqueueBatch(ctx, jobs[:10]); err != nil {
		t.Fatal(err)
	}
	slot, err := cluster.KeySlot(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	from, err := cluster.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := 1 - from
	src := redis.NewClient(&redis.Options{Addr: cluster.Addrs()[from]})
	dst := redis.NewClient(&redis.Options{Addr: cluster.Addrs()[to]})
	t.Cleanup(func() { src.Close(); dst.Close() })
	before := dumpSlot(t, src, slot)
	srcID, dstID := src.Do(ctx, "CLUSTER", "MYID").Val(), dst.Do(ctx, "CLUSTER", "MYID").Val()
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}

	done := make(chan string, 3)
	go func() {
		_, err := q.EnqueueBatch(ctx, jobs[10:])
		done <- fmt.Sprint("enqueue ", err)
	}()
	go func() {
		_, err := q.Seal(ctx, g, 20)
		done <- fmt.Sprint("seal ", err)
	}()
	go func() {
		_, err := q.Admit(ctx, 5)
		done <- fmt.Sprint("admit ", err)
	}()
	time.Sleep(time.Second)
	select {
	case d := <-done:
		t.Fatalf("%s: a call returned while its slot was moving", d)
	default:
	}
	if after := dumpSlot(t, src, slot); !maps.Equal(before, after) {
		t.Fatalf("keys changed while the slot was moving: %d keys before, %d after", len(before), len(after))
	}

	// The move is called off: the slot is stable on its node again.
	for _, c := range []*redis.Client{dst, src} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		select {
		case d := <-done:
			if d[len(d)-5:] != "<nil>" {
				t.Fatal(d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("calls still waiting after the slot became stable")
		}
	}
	info, ok, err := q.Group(ctx, g)
	if err != nil || !ok {
		t.Fatalf("group: %v %v", ok, err)
	}
	if info.Jobs != 20 || info.Declared != 20 {
		t.Fatalf("group %+v, want 20 jobs sealed at 20", info.GroupCounts)
	}
}

// dumpSlot is every key of slot on c with its DUMP.
func dumpSlot(t *testing.T, c *redis.Client, slot int) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.ClusterGetKeysInSlot(ctx, slot, 100000).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		out[k] = c.Dump(ctx, k).Val()
	}
	return out
}
