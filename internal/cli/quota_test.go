package cli_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// CheckGroup refuses, naming the quota and its limit, a submission whose
// new jobs would take its tenant beyond its most queued jobs, or that would
// create a group beyond its most active groups; a re-run's known jobs do not
// count, and other tenants are not affected.
func TestCheckGroupQuotas(t *testing.T) {
	t.Parallel()
	env := testenv.Redis(t)
	ctx := context.Background()
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, TenantMaxQueuedJobs: 10, TenantMaxActiveGroups: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := contracts.Group("acme", "g")
	enqueue(t, q, g, 8, contracts.PriorityNormal)

	if err := cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 10}); err != nil {
		t.Errorf("8 known + 2 new, reaching 10: %v", err)
	}
	err = cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 11})
	if !errors.Is(err, cli.ErrOverQuota) || !strings.Contains(err.Error(), "tenant.maxQueuedJobs is 10") ||
		!strings.Contains(err.Error(), "tenant acme has 8 queued jobs") || !strings.Contains(err.Error(), "3 new jobs would make 11") {
		t.Errorf("3 new jobs over the quota: %v", err)
	}
	err = cli.CheckGroup(ctx, q, contracts.Group("acme", "h"), cli.GroupRequest{Jobs: 3})
	if !errors.Is(err, cli.ErrOverQuota) || !strings.Contains(err.Error(), "tenant.maxQueuedJobs is 10") {
		t.Errorf("a new group with 3 jobs over the quota: %v", err)
	}
	if err := cli.CheckGroup(ctx, q, contracts.Group("globex", "g"), cli.GroupRequest{Jobs: 10}); err != nil {
		t.Errorf("another tenant: %v", err)
	}

	enqueue(t, q, contracts.Group("acme", "h"), 1, contracts.PriorityNormal)
	err = cli.CheckGroup(ctx, q, contracts.Group("acme", "new"), cli.GroupRequest{Jobs: 1})
	if !errors.Is(err, cli.ErrOverQuota) || !strings.Contains(err.Error(), "tenant.maxActiveGroups is 2") ||
		!strings.Contains(err.Error(), "has 2 active groups") {
		t.Errorf("a third group: %v", err)
	}
	// A tenant's own limit replaces the default (0 = unlimited).
	if err := q.SetTenantQuota(ctx, "acme", redisq.QuotaActiveGroups, 0); err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckGroup(ctx, q, contracts.Group("acme", "new"), cli.GroupRequest{Jobs: 1}); err != nil {
		t.Errorf("a third group with no group limit: %v", err)
	}
	// An ended group is reported as such, not as over quota.
	if _, err := q.Cancel(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 100}); !errors.Is(err, cli.ErrGroupRefuses) {
		t.Errorf("a cancelled group: %v", err)
	}
}
