package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// StuckWatch is the ZSET of groups the stuck check follows until they end,
// member groupId, score = when the group was first watched (ms). A group
// leaves the active set after Config.ActiveStaleAfter without asking for
// capacity, which is exactly what a group waiting for its last results
// does; the watch list keeps such a group in view.
func (k Keys) StuckWatch() string { return k.prefix + "stuck-watch" }

// CandidateGroups lists, sorted and without repeats, the groups that may be
// RUNNING or AGGREGATING: the members of the active set, of the three
// fair-queue ZSETs and of the stuck watch list ([Keys.StuckWatch]). It reads
// them in one round trip and changes nothing.
func (q *Queue) CandidateGroups(ctx context.Context) ([]string, error) {
	pipe := q.rdb.Pipeline()
	cmds := []*redis.StringSliceCmd{pipe.SMembers(ctx, q.keys.ActiveGroups())}
	for _, k := range q.keys.FairQueues() {
		cmds = append(cmds, pipe.ZRange(ctx, k, 0, -1))
	}
	cmds = append(cmds, pipe.ZRange(ctx, q.keys.StuckWatch(), 0, -1))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: candidate groups: %w", err)
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// WatchGroups puts groups on the stuck watch list ([Keys.StuckWatch]);
// groups already on it keep their first-watched time. [Queue.StuckGroups]
// takes a group off the list once it has ended or its meta is gone. No ids
// is a no-op.
func (q *Queue) WatchGroups(ctx context.Context, groupIDs ...string) error {
	if len(groupIDs) == 0 {
		return nil
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return err
	}
	zs := make([]redis.Z, len(groupIDs))
	for i, gid := range groupIDs {
		zs[i] = redis.Z{Score: float64(now), Member: gid}
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
// Config.Clock). after <= 0 reports every RUNNING or AGGREGATING group.
//
// The candidates are [Queue.CandidateGroups]; every candidate is put on the
// watch list, and groups that have ended (or whose meta expired) are taken
// off it. Besides the calls for the stuck groups themselves (one
// [Queue.Group] each), it makes four round trips whatever the number of
// candidates.
func (q *Queue) StuckGroups(ctx context.Context, after time.Duration) ([]GroupInfo, error) {
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
	for i, gid := range cands {
		metas[i] = pipe.HMGet(ctx, q.keys.GroupMeta(gid), "status", "startedAt", "lastProgressAt")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: stuck groups: %w", err)
	}
	var ended []any
	var stuck []string
	for i, gid := range cands {
		v := metas[i].Val()
		status, _ := v[0].(string)
		switch contracts.GroupState(status) {
		case "", contracts.StateCompleted, contracts.StateCancelled:
			ended = append(ended, gid)
			continue
		case contracts.StateRunning, contracts.StateAggregating:
		default:
			continue
		}
		last := metaInt(v[2])
		if last == 0 {
			last = metaInt(v[1])
		}
		if now-last > ms(after) {
			stuck = append(stuck, gid)
		}
	}
	if len(ended) > 0 {
		if err := q.rdb.ZRem(ctx, q.keys.StuckWatch(), ended...).Err(); err != nil {
			return nil, fmt.Errorf("redisq: unwatch groups: %w", err)
		}
	}
	out := make([]GroupInfo, 0, len(stuck))
	for _, gid := range stuck {
		info, ok, err := q.Group(ctx, gid)
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
func metaInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
