package redisq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// FairPlace is where a group stands in the two-level fair queue, read in
// one round trip ([Queue.FairPlace]).
type FairPlace struct {
	// At is the Redis time of the reading.
	At time.Time
	// Tenants counts the tenants waiting at each level.
	Tenants map[contracts.Priority]int64
	// TenantRank is the 0-based rank of the group's tenant among the
	// tenants waiting at the group's level; -1 when it is not waiting.
	TenantRank int64
	// GroupRank is the 0-based rank of the group among its tenant's groups
	// waiting at its level; -1 when it is not waiting.
	GroupRank int64
}

// FairPlace reads where g stands in the fair queue at level: the Redis
// time, the waiting tenants of every level, and the tenant's and the
// group's ranks at level. It changes nothing.
func (q *Queue) FairPlace(ctx context.Context, g contracts.GroupRef, level contracts.Priority) (*FairPlace, error) {
	pipe := q.rdb.Pipeline()
	now := pipe.Time(ctx)
	tenants := make(map[contracts.Priority]*redis.IntCmd, len(contracts.Priorities))
	for _, p := range contracts.Priorities {
		tenants[p] = pipe.ZCard(ctx, q.keys.FairQueue(p))
	}
	tenantRank := pipe.ZRank(ctx, q.keys.FairQueue(level), g.Tenant)
	groupRank := pipe.ZRank(ctx, q.keys.TenantGroups(g.Tenant, level), q.keys.GroupMember(g))
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: fair place of %s: %w", g, err)
	}
	out := &FairPlace{At: now.Val(), Tenants: make(map[contracts.Priority]int64, len(tenants)), TenantRank: -1, GroupRank: -1}
	for p, c := range tenants {
		out.Tenants[p] = c.Val()
	}
	tr, terr := tenantRank.Result()
	gr, gerr := groupRank.Result()
	if terr == nil && gerr == nil {
		out.TenantRank, out.GroupRank = tr, gr
	}
	return out, nil
}
