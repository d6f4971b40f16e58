package redisq_test

import (
	"context"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The inspector's reads see what the scripts wrote: a group's existence
// and place in the fair queue, a window's admissions per tenant, and the
// queues' sizes.
func TestInspectorReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 100}, true)
	if ok, err := q.GroupExists(ctx, G("a")); err != nil || ok {
		t.Fatalf("exists before a job: %v %v", ok, err)
	}
	enqueueN(t, q, "a", 3, contracts.PriorityNormal, 0)
	enqueueN(t, q, "b", 2, contracts.PriorityNormal, 0)
	if ok, err := q.GroupExists(ctx, G("a")); err != nil || !ok {
		t.Fatalf("exists after a job: %v %v", ok, err)
	}
	p, err := q.FairPlace(ctx, G("b"), contracts.PriorityNormal)
	if err != nil || p.Tenants[contracts.PriorityNormal] != 1 || p.TenantRank != 0 || p.GroupRank != 1 {
		t.Fatalf("fair place of b: %+v %v", p, err)
	}
	if p, _ := q.FairPlace(ctx, G("c"), contracts.PriorityNormal); p.GroupRank != -1 || p.TenantRank != -1 {
		t.Errorf("fair place of a group not waiting: %+v", p)
	}
	if _, err := q.Admit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	now, err := q.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMilli() / q.Config().Window.Milliseconds()
	c, err := q.WindowCounts(ctx, w)
	if err != nil || c.Global != 2 || c.Active != 1 || c.Tenants[testTenant] != 2 || c.BackingOff != 0 {
		t.Fatalf("window counts: %+v %v", c, err)
	}
	if n, err := q.GlobalAdmitted(ctx, w); err != nil || n != 2 {
		t.Errorf("admitted in the window: %d %v", n, err)
	}
	if n, err := q.GlobalAdmitted(ctx, w-1); err != nil || n != 0 {
		t.Errorf("admitted in the window before: %d %v", n, err)
	}
	b.clock.advance(q.Config().Window)
	if c, _ := q.WindowCounts(ctx, w+1); c.Global != 0 || len(c.Tenants) != 0 {
		t.Errorf("the next window: %+v", c)
	}
	s, err := q.Sizes(ctx)
	if err != nil || s.BackingOff != 0 || s.Inflight != 2 || s.At.IsZero() {
		t.Errorf("sizes: %+v %v", s, err)
	}
}

// TenantShare is max(1, floor(limit / active)) * weight, as lib.lua's
// tenant_share; a stored weight reads 1..MaxTenantWeight.
func TestTenantShare(t *testing.T) {
	for _, c := range []struct{ limit, active, weight, want int64 }{
		{100, 0, 1, 100}, {100, 3, 1, 33}, {100, 3, 2, 66}, {2, 5, 1, 1}, {2, 5, 3, 3}, {10, 1, 0, 10},
	} {
		if got := redisq.TenantShare(c.limit, c.active, c.weight); got != c.want {
			t.Errorf("TenantShare(%d, %d, %d) = %d, want %d", c.limit, c.active, c.weight, got, c.want)
		}
	}
	for s, want := range map[string]int64{"": 1, "x": 1, "0": 1, "3": 3, "999999": redisq.MaxTenantWeight} {
		if got := redisq.ParseTenantWeight(s); got != want {
			t.Errorf("ParseTenantWeight(%q) = %d, want %d", s, got, want)
		}
	}
}
