package redisq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultIndexSweepBudget is how long one [Queue.PruneGroupIndexes] call
// keeps at it by default.
const DefaultIndexSweepBudget = 50 * time.Millisecond

// indexSweepPage is how many index entries one step of
// [Queue.PruneGroupIndexes] checks, in one round trip.
const indexSweepPage = 500

// IndexSweep holds the position of the group index sweep
// ([Queue.PruneGroupIndexes]): the rank, in [Keys.GroupIndex], of the
// entry the next call starts at. The replicas that sweep share it.
func (k Keys) IndexSweep() string { return k.prefix + "group-index-sweep" }

// PruneGroupIndexes removes from [Keys.GroupIndex] and the tenants'
// [Keys.TenantGroupIndex] the entries of groups whose keys have expired,
// so that the indexes do not grow with groups no one lists. It goes through
// the index oldest first (by creation time), a page at a time, from where
// the last call stopped, until budget is spent (0 = [DefaultIndexSweepBudget])
// or it reaches the end of the index; the next call then starts again at
// the oldest. Listings prune what they meet too ([Queue.ListGroups]). It
// returns the entries it removed. With shards every shard's indexes are
// swept concurrently, each with the whole budget and a position of its
// own, and the removed entries summed.
func (q *Queue) PruneGroupIndexes(ctx context.Context, budget time.Duration) (int, error) {
	if budget <= 0 {
		budget = DefaultIndexSweepBudget
	}
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int, error) { return s.PruneGroupIndexes(ctx, budget) })
	}
	deadline := time.Now().Add(budget)
	pos, err := q.rdb.Get(ctx, q.keys.IndexSweep()).Int64()
	if err != nil && !isNil(err) {
		return 0, fmt.Errorf("redisq: prune group indexes: %w", err)
	}
	pos = max(pos, 0)
	pruned := 0
	for {
		members, err := q.rdb.ZRange(ctx, q.keys.GroupIndex(), pos, pos+indexSweepPage-1).Result()
		if err != nil {
			return pruned, fmt.Errorf("redisq: prune group indexes: %w", err)
		}
		pipe := q.rdb.Pipeline()
		exists := make([]*redis.IntCmd, len(members))
		for i, m := range members {
			exists[i] = pipe.Exists(ctx, q.keys.GroupMeta(q.indexRef("", m)))
		}
		if len(members) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return pruned, fmt.Errorf("redisq: prune group indexes: %w", err)
			}
		}
		var gone []any
		for i, m := range members {
			if exists[i].Val() == 0 {
				gone = append(gone, m)
			}
		}
		if len(gone) > 0 {
			q.pruneIndex(ctx, "", q.keys.GroupIndex(), gone)
			pruned += len(gone)
		}
		pos += int64(len(members) - len(gone)) // the kept ones; the rest moved down
		end := len(members) < indexSweepPage
		if end {
			pos = 0 // the next call starts again at the oldest
		}
		if end || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err := q.rdb.Set(ctx, q.keys.IndexSweep(), pos, 0).Err(); err != nil {
		return pruned, fmt.Errorf("redisq: prune group indexes: %w", err)
	}
	return pruned, nil
}
