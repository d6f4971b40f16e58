package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// DefaultSweepChunk is the most jobs one step of a cancel ([Queue.Cancel],
// [Queue.FinishCancels]) or of a group's counter correction
// ([Queue.CorrectCounters]) goes through: a script call of a few
// milliseconds whatever the size of the non-ready queue or of the group.
const DefaultSweepChunk = 500

// DefaultScriptTimeBudget is the default [Config.ScriptTimeBudget]: how long
// one call of a script that goes through many jobs (a cancel step, a
// release) keeps at it before it leaves the rest to the next call. A step of [DefaultSweepChunk] jobs takes a few milliseconds,
// but while a fork of Redis is alive (an AOF rewrite, an RDB snapshot) each
// memory page a script writes first is copied, and the same step can take
// ten to thirty times as long: the budget keeps every call short then too
// (docs/ARCHITECTURE.md §6.5).
const DefaultScriptTimeBudget = 10 * time.Millisecond

// CancelSweep is the ZSET of the groups whose cancel has jobs left to go
// through (lua/cancel.lua), member "<tenant>:<groupId>", every score 0 so
// that a tenant's groups are one lexical range. [Queue.FinishCancels]
// finishes them; a group leaves it when its cancel is done.
func (k Keys) CancelSweep() string { return k.prefix + "cancel-sweep" }

// SweepOption configures one call that works in bounded steps.
type SweepOption func(*sweepOptions)

type sweepOptions struct {
	chunk   int
	settled string // ResultsSettledThrough, in ms ("" = not given)
}

// ResultsSettledThrough tells [Queue.RepairGroup] that every result
// published on RESULT before t has been taken from it (recorded), so that
// a job still RUNNING whose claim expired before t has no result on the
// way. Without it the repair judges runs by their claims alone.
func ResultsSettledThrough(t time.Time) SweepOption {
	return func(o *sweepOptions) { o.settled = strconv.FormatInt(t.UnixMilli(), 10) }
}

// SweepChunk sets the most jobs one step goes through (default
// [DefaultSweepChunk]; values below 1 mean 1).
func SweepChunk(n int) SweepOption { return func(o *sweepOptions) { o.chunk = max(n, 1) } }

func sweepOptionsOf(opts []SweepOption) sweepOptions {
	o := sweepOptions{chunk: DefaultSweepChunk}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

var correctTenantScript = loadScript("correct_tenant")

func init() { allScripts["correct_tenant"] = correctTenantScript }

// FinishedCancel is a cancel [Queue.FinishCancels] finished.
type FinishedCancel struct {
	Group contracts.GroupRef
	// Dropped counts the jobs the sweep cancelled.
	Dropped int64
	// Counts are the group's counts after the sweep.
	Counts GroupCounts
}

// FinishCancels finishes the cancels cut short (a process died between two
// steps of [Queue.Cancel]): at most max groups of [Keys.CancelSweep] (all of
// them when max <= 0), each in bounded steps. It returns the groups it
// finished with their counts, so the caller can publish their final event.
// With shards, max bounds each shard's groups (the shards go concurrently):
// a call may finish up to max groups per shard, and returns every one it
// finished, ordered as the sweep lists them ("<tenant>:<groupId>").
func (q *Queue) FinishCancels(ctx context.Context, max int, opts ...SweepOption) ([]FinishedCancel, error) {
	if q.sharded() {
		parts := make([][]FinishedCancel, len(q.shards))
		err := q.eachShard(func(i int, s *Queue) (err error) {
			parts[i], err = s.FinishCancels(ctx, max, opts...)
			return err
		})
		out := slices.Concat(parts...)
		slices.SortFunc(out, func(a, b FinishedCancel) int { return strings.Compare(groupKey(a.Group), groupKey(b.Group)) })
		return out, err
	}
	stop := int64(-1)
	if max > 0 {
		stop = int64(max) - 1
	}
	gks, err := q.rdb.ZRange(ctx, q.keys.CancelSweep(), 0, stop).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: finish cancels: %w", err)
	}
	o := sweepOptionsOf(opts)
	var out []FinishedCancel
	for _, gk := range gks {
		g := parseGroupKey(gk)
		res, err := q.cancelSteps(ctx, g, true, o)
		if err != nil {
			return out, err
		}
		if res.Outcome == Cancelled {
			res.Group.State = contracts.StateCancelled
			out = append(out, FinishedCancel{Group: g, Dropped: res.Dropped, Counts: res.Group})
		}
	}
	return out, nil
}

// correctNonReady re-derives the non-ready counters (see
// [Queue.CorrectCounters]) in bounded steps: first every group's, each from
// its own job ids (lua/correct.lua), then every tenant's as the sum of its
// groups' (lua/correct_tenant.lua). A tenant one of whose groups moved
// during its count, or whose cancel is under way, waits for the next pass.
func (q *Queue) correctNonReady(ctx context.Context, o sweepOptions) (int, error) {
	watched, err := q.rdb.ZRange(ctx, q.keys.StuckWatch(), 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: correct counters: %w", err)
	}
	tenants, err := q.rdb.SMembers(ctx, q.keys.QuotaTenants()).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: correct counters: %w", err)
	}
	groups := make([]contracts.GroupRef, len(watched))
	byTenant := map[string][]any{}
	for _, t := range tenants {
		byTenant[t] = nil
	}
	for i, gk := range watched {
		groups[i] = parseGroupKey(gk)
		byTenant[groups[i].Tenant] = append(byTenant[groups[i].Tenant], groups[i].ID)
	}
	fixed := 0
	skip := map[string]bool{}
	step := func(g contracts.GroupRef, cursor string, counted int64) ([]string, []any) {
		return []string{q.keys.NonReadyQueue(), q.keys.GroupMeta(g), q.keys.GroupIDs(g), q.keys.CongestionCount(g), q.keys.CongestionStats(g)},
			[]any{groupKey(g), cursor, counted, o.chunk}
	}
	for start := 0; start < len(groups); start += scriptChunk {
		part := groups[start:min(start+scriptChunk, len(groups))]
		// the first step of each group, in one round trip: most groups
		// are counted in it
		replies, err := q.pipelineScripts(ctx, "correct", correctScript, len(part), func(i int) ([]string, []any) {
			return step(part[i], "0", 0)
		})
		if err != nil {
			return fixed, err
		}
		for i, v := range replies {
			l := toList(v)
			for toStr(l[0]) != "0" {
				keys, args := step(part[i], toStr(l[0]), toInt(l[1]))
				r, err := q.run(ctx, "correct", correctScript, keys, args...)
				if err != nil {
					return fixed, err
				}
				l = toList(r)
			}
			switch toInt(l[2]) {
			case 1:
				fixed++
			case -1:
				skip[part[i].Tenant] = true
			}
		}
	}
	order := make([]string, 0, len(byTenant))
	for t := range byTenant {
		if !skip[t] {
			order = append(order, t)
		}
	}
	if len(order) == 0 {
		return fixed, nil
	}
	slices.Sort(order)
	replies, err := q.pipelineScripts(ctx, "correct_tenant", correctTenantScript, len(order), func(i int) ([]string, []any) {
		t := order[i]
		return []string{q.keys.TenantNonReady(t), q.keys.TenantActiveGroups(t), q.keys.CancelSweep()},
			append([]any{q.keys.Prefix(), t}, byTenant[t]...)
	})
	if err != nil {
		return fixed, err
	}
	for _, v := range replies {
		if toInt(v) == 1 {
			fixed++
		}
	}
	return fixed, nil
}
