package conns_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// QueueState reports the tenants sharing the global rate
// (bulk_action_active_tenants), not the groups: acme's two groups and
// globex's one are two active tenants.
func TestQueueStateCountsActiveTenants(t *testing.T) {
	r := testenv.Redis(t)
	url, _, _ := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.StreamStorage = r.URL, r.Prefix, url, "memory"
	ctx := context.Background()
	c, err := conns.Connect(ctx, cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var jobs []redisq.Job
	for _, g := range []contracts.GroupRef{contracts.Group("acme", "a"), contracts.Group("acme", "b"), contracts.Group("globex", "a")} {
		for i := range 3 {
			jobs = append(jobs, redisq.Job{Group: g, ID: strconv.Itoa(i), Type: "noop"})
		}
	}
	if _, err := c.Queue.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Queue.Admit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s, err := conns.QueueState(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.ActiveTenants != 2 {
		t.Errorf("ActiveTenants = %d, want 2 (tenants, not groups)", s.ActiveTenants)
	}
	if s.InflightSize != 4 || s.GroupsPerLevel["normal"] != 3 || s.GlobalRateLimit != float64(cfg.GlobalRps) {
		t.Errorf("state = %+v", s)
	}
}
