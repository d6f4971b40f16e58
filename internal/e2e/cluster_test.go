package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestPipelineOnRedisCluster runs every target against a Redis Cluster of
// three primaries (REDIS_CLUSTER_ADDRS) with a hash-tagged prefix: groups
// that succeed, retry, back off and fail complete with exact counts, and
// the keys live in the one slot of the prefix's tag (one node holds them
// all; the others hold none).
func TestPipelineOnRedisCluster(t *testing.T) {
	cluster := testenv.NewRedisCluster(t, 3)
	e := newEnv(t)
	f, mux := newFailing()
	tag := "{" + strings.Trim(e.prefix, ":") + "}:"
	cfg := e.config(func(c *config.Config) {
		c.RedisCluster = strings.Join(cluster.Addrs(), ",")
		c.RedisURL = "redis://" + cluster.Addrs()[0] + "/0"
		c.RedisPrefix = tag
		c.MaxRetryCount = 3
	})
	r := e.start(cfg, stack.PipelineTargets, mux)
	q := r.st.Conns.Queue

	e.submit("many", "sleep", 3000, `{"ms":1}`, "")
	e.submit("flaky", "flaky", 5, `{}`, "")
	e.submit("limited", "limited", 3, `{}`, "")
	e.submit("perm", "perm", 4, `{}`, "")
	for gid, want := range map[string][2]int64{"many": {3000, 0}, "flaky": {5, 0}, "limited": {3, 0}, "perm": {0, 4}} {
		ev := e.wait(gid, 2*time.Minute)
		if ev.State != contracts.StateCompleted || ev.Succeeded != want[0] || ev.Failed != want[1] {
			t.Errorf("%s: %+v, want %d succeeded %d failed", gid, ev, want[0], want[1])
		}
		info := group(t, q, gid)
		if info.Done != want[0]+want[1] || info.Pending != 0 {
			t.Errorf("group %s meta: %+v", gid, info.GroupCounts)
		}
	}
	for i := range 5 {
		if n := len(f.callTimes("flaky", fmt.Sprintf("job-%06d", i))); n != 3 {
			t.Errorf("flaky job %d ran %d times, want 3", i, n)
		}
	}
	ctx := context.Background()
	perNode, err := cluster.KeysPerNode(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	holding := 0
	for _, n := range perNode {
		if n > 0 {
			holding++
		}
	}
	if holding != 1 {
		t.Errorf("keys of the prefix %s per node: %v, want them all on one node (its hash tag's slot)", tag, perNode)
	}
}

// TestPipelineOnRedisClusterShards runs every target against a Redis
// Cluster of three primaries with 16 logical shards (REDIS_SHARDS, a prefix
// without a hash tag): twelve tenants' groups of http jobs, counted at a
// real endpoint, and of jobs that retry and fail, complete with exact
// counts, every http job called once; each tenant's keys are in its
// shard's slot, and the shards are spread over every primary.
func TestPipelineOnRedisClusterShards(t *testing.T) {
	cluster := testenv.NewRedisCluster(t, 3)
	e := newEnv(t)
	d := newDownstream(t)
	f, mux := newFailingWith(builtin.Options{AllowedHosts: []string{"127.0.0.1"}})
	cfg := e.config(func(c *config.Config) {
		c.RedisCluster = strings.Join(cluster.Addrs(), ",")
		c.RedisURL = "redis://" + cluster.Addrs()[0] + "/0"
		c.RedisShards = 16
		c.MaxRetryCount = 3
		c.WorkerCount = 20
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
	})
	r := e.start(cfg, stack.PipelineTargets, mux)
	q := r.st.Conns.Queue
	if q.ShardCount() != 16 {
		t.Fatalf("the queue has %d shards, want 16", q.ShardCount())
	}
	ctx := context.Background()
	tenants := make([]string, 12)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%02d", i)
		e.submitHTTPAs(e.client.ForTenant(tenants[i]), d, tenants[i]+"-http", 500)
	}
	e.submit("flaky", "flaky", 5, `{}`, "")
	e.submit("perm", "perm", 4, `{}`, "")
	for _, tn := range tenants {
		gid := tn + "-http"
		ev := e.waitAs(e.client.ForTenant(tn), gid, 3*time.Minute)
		if ev.State != contracts.StateCompleted || ev.Succeeded != 500 || ev.Failed != 0 {
			t.Errorf("%s/%s: final event %+v, want COMPLETED with 500 succeeded", tn, gid, ev)
		}
		info, ok, err := q.Group(ctx, contracts.Group(tn, gid))
		if err != nil || !ok || info.Done != 500 || info.Pending != 0 {
			t.Errorf("%s/%s: meta %+v (%v %v)", tn, gid, info, ok, err)
		}
		calls, _ := d.count(gid, 500)
		for id, c := range calls {
			if c != 1 {
				t.Errorf("%s/%s/%s called %d times, want once", tn, gid, id, c)
			}
		}
		key := redisq.ShardPrefix(e.prefix, redisq.ShardOf(tn, 16)) + "group:" + tn + ":" + gid + ":meta"
		if n, err := r.st.Conns.Redis.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("%s: %s exists %d (%v)", tn, key, n, err)
		}
	}
	for gid, want := range map[string][2]int64{"flaky": {5, 0}, "perm": {0, 4}} {
		ev := e.wait(gid, 2*time.Minute)
		if ev.State != contracts.StateCompleted || ev.Succeeded != want[0] || ev.Failed != want[1] {
			t.Errorf("%s: %+v, want %d succeeded %d failed", gid, ev, want[0], want[1])
		}
	}
	for i := range 5 {
		if n := len(f.callTimes("flaky", fmt.Sprintf("job-%06d", i))); n != 3 {
			t.Errorf("flaky job %d ran %d times, want 3", i, n)
		}
	}
	perNode, err := cluster.KeysPerNode(ctx, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range perNode {
		if n == 0 {
			t.Errorf("keys per node %v: node %d holds none of the 16 shards", perNode, i)
		}
	}
	t.Logf("keys per node %v", perNode)
}

// clusterRun is a run of http jobs on a Redis Cluster with a fault in the
// middle: every target on cluster with a hash-tagged prefix, three groups
// of http jobs (6,000 in all) counted at a real endpoint, and fault once
// the first 200 were called, given the installation's slot and the index
// of the node serving it. Every group must then complete with exact counts
// and no failure; a job must be called once, or, with atLeastOnce, at
// least once (it returns how many were called more than once).
func clusterRun(t *testing.T, cluster *testenv.RedisCluster, name string, atLeastOnce bool,
	fault func(ctx context.Context, slot, owner int)) (tag string, twice int) {
	e := newEnv(t)
	d := newDownstream(t)
	first := name + "-a"
	d.delay[first] = 5 * time.Millisecond
	tag = "{" + strings.Trim(e.prefix, ":") + "}:"
	cfg := e.config(func(c *config.Config) {
		c.RedisCluster = strings.Join(cluster.Addrs(), ",")
		c.RedisURL = "redis://" + cluster.Addrs()[0] + "/0"
		c.RedisPrefix = tag
		c.GlobalRps = 1500
		c.WorkerCount = 20
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
	})
	r := e.start(cfg, stack.PipelineTargets, nil)
	q := r.st.Conns.Queue
	ctx := context.Background()
	slot, err := cluster.KeySlot(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]int{first: 3000, name + "-b": 2000, name + "-c": 1000}
	for gid, n := range groups {
		e.submitHTTP(d, gid, n)
	}
	testkit.WaitFor(t, "jobs running", time.Minute, func() bool { _, n := d.count(first, 3000); return n > 200 })
	owner, err := cluster.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	fault(ctx, slot, owner)
	for gid, n := range groups {
		ev := e.wait(gid, 3*time.Minute)
		if ev.State != contracts.StateCompleted || ev.Succeeded != int64(n) || ev.Failed != 0 {
			t.Errorf("%s: final event %+v, want COMPLETED with %d succeeded", gid, ev, n)
		}
		info := group(t, q, gid)
		if info.Done != int64(n) || info.Pending != 0 {
			t.Errorf("%s: meta %+v", gid, info.GroupCounts)
		}
		calls, _ := d.count(gid, n)
		for id, c := range calls {
			switch {
			case c == 0:
				t.Errorf("%s/%s never called", gid, id)
			case c > 1 && !atLeastOnce:
				t.Errorf("%s/%s called %d times, want once", gid, id, c)
			case c > 1:
				twice++
			}
		}
	}
	return tag, twice
}

// TestSlotMovesMidRun moves the installation's slot between primaries
// twice while http jobs run, as `redis-cli --cluster reshard` does (keys
// migrated in small batches, so that the slot stays half moved for a
// while): every job is called once, every group completes with exact
// counts and no failure, and the keys end on the last primary.
func TestSlotMovesMidRun(t *testing.T) {
	cluster := testenv.NewRedisCluster(t, 3)
	last := -1
	tag, _ := clusterRun(t, cluster, "moving", false, func(ctx context.Context, slot, owner int) {
		for hop := 1; hop <= 2; hop++ {
			to := (owner + hop) % 3
			start := time.Now()
			if err := cluster.MigrateSlot(ctx, slot, to, 20, 2*time.Millisecond); err != nil {
				t.Fatalf("move %d: %v", hop, err)
			}
			t.Logf("slot %d moved to node %d in %s", slot, to, time.Since(start).Round(time.Millisecond))
			last = to
		}
	})
	perNode, err := cluster.KeysPerNode(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range perNode {
		if (i == last) != (n > 0) {
			t.Errorf("keys per node %v, want all on node %d", perNode, last)
			break
		}
	}
}

// TestPrimaryFailsOverMidRun kills the primary that holds the
// installation's slot (SIGKILL) while http jobs run; its replica is
// promoted (a Redis that may have come back older: the fetchers replay
// SUBMIT) and the run goes on: every group completes with exact counts, no
// job failed, and every job was called (a job whose recorded start the
// replica lacks may be called again: docs/ARCHITECTURE.md §6.7).
func TestPrimaryFailsOverMidRun(t *testing.T) {
	cluster := testenv.NewRedisClusterWithReplicas(t, 3)
	_, twice := clusterRun(t, cluster, "failover", true, func(ctx context.Context, slot, owner int) {
		killed := time.Now()
		cluster.Nodes[owner].Kill()
		replica := owner + 3
		testkit.WaitFor(t, "the replica promoted", time.Minute, func() bool {
			o, err := cluster.SlotOwnerSeenBy(ctx, slot, replica)
			return err == nil && o == replica
		})
		t.Logf("primary %d killed; replica %d serves the slot after %s", owner, replica, time.Since(killed).Round(100*time.Millisecond))
	})
	t.Logf("%d of 6000 jobs called more than once", twice)
}
