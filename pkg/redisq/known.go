package redisq

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TenantSeen reports whether Redis knows tenant: it has groups listed in
// its group index, a weight, or a quota of its own. A tenant none of these
// name has never submitted (or all its groups expired), which for a
// command naming it usually means a typo.
func (q *Queue) TenantSeen(ctx context.Context, tenant string) (bool, error) {
	if q.sharded() {
		return q.For(tenant).TenantSeen(ctx, tenant)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return false, err
	}
	pipe := q.rdb.Pipeline()
	indexed := pipe.Exists(ctx, q.keys.TenantGroupIndex(tenant))
	weighted := pipe.HExists(ctx, q.keys.TenantWeights(), tenant)
	quotas := pipe.HKeys(ctx, q.keys.TenantQuotas())
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	if indexed.Val() > 0 || weighted.Val() {
		return true, nil
	}
	for _, f := range quotas.Val() {
		if t, _, _ := strings.Cut(f, ":"); t == tenant {
			return true, nil
		}
	}
	return false, nil
}

// IndexGroup lists g in the group indexes that [Queue.ListGroups] reads,
// at createdAtMs, unless it is listed already. A group is listed by its
// first jobs; a group created by a seal, pause or cancel before its first
// job is listed by this call, made by whoever asks for that creation.
func (q *Queue) IndexGroup(ctx context.Context, g contracts.GroupRef, createdAtMs int64) error {
	if q.sharded() {
		return q.For(g.Tenant).IndexGroup(ctx, g, createdAtMs)
	}
	if err := g.Validate(); err != nil {
		return err
	}
	pipe := q.rdb.TxPipeline()
	pipe.ZAddNX(ctx, q.keys.GroupIndex(), redis.Z{Score: float64(createdAtMs), Member: g.Tenant + ":" + g.ID})
	pipe.ZAddNX(ctx, q.keys.TenantGroupIndex(g.Tenant), redis.Z{Score: float64(createdAtMs), Member: g.ID})
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("listing group %s: %w", g, err)
	}
	return nil
}
