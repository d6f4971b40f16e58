package redisq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// StuckWatch is the ZSET of groups the stuck check follows until they end,
// member "<tenant>:<groupId>", score = when the group was first watched (ms).
// Admission puts every group that starts (CREATED -> RUNNING) on it, so a
// group that waits only for its last results stays in view; it is also
// where [Queue.CorrectCounters] finds the groups that may have backed-off
// jobs.
func (k Keys) StuckWatch() string { return k.prefix + "stuck-watch" }

// CandidateGroups lists, sorted (by tenant, then groupId) and without
// repeats, the groups that may be RUNNING or AGGREGATING: the groups queued
// at any level (the tenant ZSETs of the tenants in the fair queue) and those
// on the stuck watch list ([Keys.StuckWatch]). It reads them in two round
// trips and changes nothing. With shards it reads every shard (two round
// trips each, the shards concurrently) and merges their lists.
func (q *Queue) CandidateGroups(ctx context.Context) ([]contracts.GroupRef, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) ([]contracts.GroupRef, error) { return s.CandidateGroups(ctx) })
		if err != nil {
			return nil, err
		}
		out := slices.Concat(parts...)
		slices.SortFunc(out, compareGroups)
		return slices.Compact(out), nil
	}
	pipe := q.rdb.Pipeline()
	levels := make([]*redis.StringSliceCmd, len(contracts.Priorities))
	for i, p := range contracts.Priorities {
		levels[i] = pipe.ZRange(ctx, q.keys.FairQueue(p), 0, -1)
	}
	watched := pipe.ZRange(ctx, q.keys.StuckWatch(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: candidate groups: %w", err)
	}
	var out []contracts.GroupRef
	for _, gk := range watched.Val() {
		out = append(out, parseGroupKey(gk))
	}
	type tenantAt struct {
		tenant string
		cmd    *redis.StringSliceCmd
	}
	var queued []tenantAt
	pipe = q.rdb.Pipeline()
	for i, p := range contracts.Priorities {
		for _, t := range levels[i].Val() {
			queued = append(queued, tenantAt{t, pipe.ZRange(ctx, q.keys.TenantGroups(t, p), 0, -1)})
		}
	}
	if len(queued) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("redisq: candidate groups: %w", err)
		}
	}
	for _, tq := range queued {
		for _, gid := range tq.cmd.Val() {
			out = append(out, contracts.GroupRef{Tenant: tq.tenant, ID: gid})
		}
	}
	slices.SortFunc(out, compareGroups)
	return slices.Compact(out), nil
}

// compareGroups orders groups by tenant, then groupId.
func compareGroups(a, b contracts.GroupRef) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
}

// WatchGroups puts groups on the stuck watch list ([Keys.StuckWatch]);
// groups already on it keep their first-watched time. [Queue.StuckGroups]
// takes a group off the list once it has ended or its meta is gone. No
// groups is a no-op.
func (q *Queue) WatchGroups(ctx context.Context, gs ...contracts.GroupRef) error {
	if len(gs) == 0 {
		return nil
	}
	if q.sharded() {
		idx := q.shardIndexes(len(gs), func(i int) string { return gs[i].Tenant })
		return q.onShards(idx, func(s *Queue, ix []int) error { return s.WatchGroups(ctx, pick(gs, ix)...) })
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return err
	}
	zs := make([]redis.Z, len(gs))
	for i, g := range gs {
		zs[i] = redis.Z{Score: float64(now), Member: groupKey(g)}
	}
	if err := q.rdb.ZAddNX(ctx, q.keys.StuckWatch(), zs...).Err(); err != nil {
		return fmt.Errorf("redisq: watch groups: %w", err)
	}
	return nil
}

// StuckGroups returns the groups that are RUNNING or AGGREGATING and have
// made no progress for longer than after: their last recorded result
// (LastProgressAtMs), or when none was recorded yet their start
// (StartedAtMs), is more than after before now (Redis TIME, or
// Config.Clock). after <= 0 reports every RUNNING or AGGREGATING group. A
// PAUSED group is not stuck, nor is one its schedule holds (outside its
// sending windows): its leases still expire and are repaired as any.
//
// The candidates are [Queue.CandidateGroups]; every candidate is put on the
// watch list, and groups that have ended (or whose meta expired) are taken
// off it. Besides the calls for the stuck groups themselves (one
// [Queue.Group] each), it makes five round trips whatever the number of
// candidates. With shards every shard is checked on its own, concurrently,
// and the stuck groups of all of them returned in the candidates' order.
func (q *Queue) StuckGroups(ctx context.Context, after time.Duration) ([]GroupInfo, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) ([]GroupInfo, error) { return s.StuckGroups(ctx, after) })
		if err != nil {
			return nil, err
		}
		out := slices.Concat(parts...)
		slices.SortFunc(out, func(a, b GroupInfo) int { return compareGroups(a.Group, b.Group) })
		return out, nil
	}
	cands, err := q.CandidateGroups(ctx)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	if err := q.WatchGroups(ctx, cands...); err != nil {
		return nil, err
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	pipe := q.rdb.Pipeline()
	metas := make([]*redis.SliceCmd, len(cands))
	for i, g := range cands {
		metas[i] = pipe.HMGet(ctx, q.keys.GroupMeta(g), "status", "startedAt", "lastProgressAt", "notBefore", "winAt")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: stuck groups: %w", err)
	}
	var ended []any
	var stuck []contracts.GroupRef
	for i, g := range cands {
		v := metas[i].Val()
		status, _ := v[0].(string)
		switch contracts.GroupState(status) {
		case "", contracts.StateCompleted, contracts.StateCancelled:
			ended = append(ended, groupKey(g))
			continue
		case contracts.StateRunning, contracts.StateAggregating:
		default:
			continue
		}
		if sc, err := scheduleOf(metaStr(v[3]), "", metaStr(v[4]), now); err == nil && !sc.HeldUntil.IsZero() {
			continue // outside its sending windows: it waits on purpose
		}
		last := metaInt(v[2])
		if last == 0 {
			last = metaInt(v[1])
		}
		if now-last > ms(after) {
			stuck = append(stuck, g)
		}
	}
	if len(ended) > 0 {
		if err := q.rdb.ZRem(ctx, q.keys.StuckWatch(), ended...).Err(); err != nil {
			return nil, fmt.Errorf("redisq: unwatch groups: %w", err)
		}
	}
	out := make([]GroupInfo, 0, len(stuck))
	for _, g := range stuck {
		info, ok, err := q.Group(ctx, g)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, *info)
		}
	}
	return out, nil
}

// metaInt parses an HMGET field; a missing or malformed field is 0.
// metaStr reads a string field of an HMGET reply ("" when absent).
func metaStr(v any) string {
	s, _ := v.(string)
	return s
}

func metaInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
