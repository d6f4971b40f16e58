package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestStatsWithoutNATS(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	enqueue(t, q, contracts.Group("acme", "a"), 2, contracts.PriorityNormal)
	enqueue(t, q, contracts.Group("acme", "b"), 1, contracts.PriorityNormal)
	enqueue(t, q, contracts.Group("globex", "c"), 1, contracts.PriorityLow)
	s, err := cli.Stats(ctx, &cli.Conn{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if s.WaitingGroups != 3 || s.GroupsPerLevel["normal"] != 2 || s.GroupsPerLevel["low"] != 1 || s.GroupsPerLevel["high"] != 0 {
		t.Errorf("groups: %d %v", s.WaitingGroups, s.GroupsPerLevel)
	}
	if s.ReadyDepth != -1 {
		t.Errorf("ReadyDepth = %d without NATS, want -1", s.ReadyDepth)
	}
	if s.Rate.Limit != 10000 || s.Congestion == nil || s.At.IsZero() {
		t.Errorf("stats = %+v", s)
	}

	// Rate shares are per tenant: acme's two groups and globex's one make
	// two active tenants once admission has asked for capacity.
	if _, err := q.Admit(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s, err = cli.Stats(ctx, &cli.Conn{Queue: q}); err != nil {
		t.Fatal(err)
	}
	if s.Rate.ActiveTenants != 2 || s.Rate.TenantShare != 5000 {
		t.Errorf("rate = %+v, want 2 active tenants sharing 5000/s each", s.Rate)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"activeTenants":2`) || !strings.Contains(string(b), `"tenantSharePerSecond":5000`) {
		t.Errorf("json = %s", b)
	}
}
