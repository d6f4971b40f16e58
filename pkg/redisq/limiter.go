package redisq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// LimiterStatus is the rate limiter's view of the current window. Rate
// shares are per tenant (docs/ARCHITECTURE.md §5): a tenant that splits its
// work into many groups gets one share.
type LimiterStatus struct {
	Window      int64 // window number (ms since epoch / window length)
	GlobalCount int64 // jobs admitted in this window
	GlobalLimit int64
	TenantCount int64 // the tenant's jobs admitted in this window ("" tenant: 0)
	// TenantLimit is the tenant's share: max(1, floor(global / active)) *
	// weight ("" tenant: weight 1).
	TenantLimit int64
	Weight      int64 // the tenant's weight (1 by default)
	Active      int64 // tenants sharing the global limit
}

// LimiterStatus reports the current window's counts and limits, for tenant
// when it is not empty. With shards, GlobalCount and Active are summed over
// every shard and GlobalLimit is the installation's ([Config.GlobalLimit]);
// a tenant's TenantCount, Weight and TenantLimit come from its shard, whose
// part of the global limit it shares with the shard's active tenants (what
// admission holds it to); with no tenant, TenantLimit is the share of a
// tenant of weight 1 over the installation's figures.
func (q *Queue) LimiterStatus(ctx context.Context, tenant string) (*LimiterStatus, error) {
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	w := now / ms(q.cfg.Window)
	if !q.sharded() {
		return q.limiterStatus(ctx, tenant, w)
	}
	home := -1
	if tenant != "" {
		home = ShardOf(tenant, len(q.shards))
	}
	parts := make([]*LimiterStatus, len(q.shards))
	if err := q.eachShard(func(i int, s *Queue) (err error) {
		t := ""
		if i == home {
			t = tenant
		}
		parts[i], err = s.limiterStatus(ctx, t, w)
		return err
	}); err != nil {
		return nil, err
	}
	st := &LimiterStatus{Window: w, GlobalLimit: int64(q.cfg.GlobalLimit), Weight: 1}
	for _, p := range parts {
		st.GlobalCount += p.GlobalCount
		st.Active += p.Active
	}
	if home >= 0 {
		p := parts[home]
		st.TenantCount, st.Weight, st.TenantLimit = p.TenantCount, p.Weight, p.TenantLimit
	} else {
		st.TenantLimit = TenantShare(st.GlobalLimit, st.Active, st.Weight)
	}
	return st, nil
}

// limiterStatus is LimiterStatus in window w, on q's own keys.
func (q *Queue) limiterStatus(ctx context.Context, tenant string, w int64) (*LimiterStatus, error) {
	pipe := q.rdb.Pipeline()
	g := pipe.Get(ctx, q.keys.RateLimitGlobal(w))
	var tc, tw *redis.StringCmd
	if tenant != "" {
		tc = pipe.Get(ctx, q.keys.RateLimitTenant(tenant, w))
		tw = pipe.HGet(ctx, q.keys.TenantWeights(), tenant)
	}
	a := pipe.SCard(ctx, q.keys.ActiveTenants())
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: limiter status: %w", err)
	}
	st := &LimiterStatus{Window: w, GlobalLimit: int64(q.cfg.GlobalLimit), Active: a.Val(), Weight: 1}
	st.GlobalCount, _ = g.Int64()
	if tc != nil {
		st.TenantCount, _ = tc.Int64()
		st.Weight = ParseTenantWeight(tw.Val())
	}
	st.TenantLimit = TenantShare(st.GlobalLimit, st.Active, st.Weight)
	return st, nil
}

// ActiveTenants lists the tenants sharing the global limit; with shards,
// those of every shard, shard after shard.
func (q *Queue) ActiveTenants(ctx context.Context) ([]string, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) ([]string, error) { return s.ActiveTenants(ctx) })
		if err != nil {
			return nil, err
		}
		return slices.Concat(parts...), nil
	}
	return q.rdb.SMembers(ctx, q.keys.ActiveTenants()).Result()
}

// TenantShare is a tenant's share of the global limit per window, and the
// rate of its groups' congestion-aware backoff: max(1, floor(limit /
// active)) * weight (lua/lib.lua's tenant_share).
func TenantShare(limit, active, weight int64) int64 {
	if active < 1 {
		active = 1
	}
	r := limit / active
	if r < 1 {
		r = 1
	}
	return r * max(weight, 1)
}

// ParseTenantWeight reads a stored tenant weight: 1..MaxTenantWeight, absent = 1.
func ParseTenantWeight(s string) int64 {
	w, err := strconv.ParseInt(s, 10, 64)
	if err != nil || w < 1 {
		return 1
	}
	return min(w, MaxTenantWeight)
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
