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
	"github.com/bulkaction/bulkaction/pkg/contracts"
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
