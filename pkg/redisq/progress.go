package redisq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Progress history (docs/ARCHITECTURE.md §8): while a group runs, the
// aggregators append a sample of its done plus cancelled jobs to
// [Keys.GroupProgress] each time they publish its counts (at most once a
// second per aggregator), so that a reading of the group can measure its
// rate over the last [ProgressWindow] rather than since it started.
const (
	// ProgressKeep is how many samples a group's history keeps.
	ProgressKeep = 60
	// ProgressMinGap is the least time between two samples of a group: a
	// sample closer to the newest is not written, so [ProgressKeep] samples
	// span at least 30 s however many aggregators run.
	ProgressMinGap = 500 * time.Millisecond
	// ProgressWindow is the span a group's rate is measured over.
	ProgressWindow = 30 * time.Second
)

// ProgressSample is one sample of a group's progress.
type ProgressSample struct {
	// AtMs is when it was taken (Redis TIME, ms).
	AtMs int64
	// Count is the group's done plus cancelled jobs then.
	Count int64
}

// RecordProgress appends a sample of each group's done plus cancelled jobs
// to its progress history, read atomically with its counters at Redis TIME
// (or Config.Clock). A group that has ended, or whose meta is gone, gets
// none; nor does one whose newest sample is less than [ProgressMinGap] old.
// The calls go in one round trip (per shard, the shards at once).
func (q *Queue) RecordProgress(ctx context.Context, groups ...contracts.GroupRef) error {
	if len(groups) == 0 {
		return nil
	}
	if q.sharded() {
		idx := q.shardIndexes(len(groups), func(i int) string { return groups[i].Tenant })
		return q.onShards(idx, func(s *Queue, ix []int) error {
			return s.RecordProgress(ctx, pick(groups, ix)...)
		})
	}
	now := q.now()
	_, err := q.pipelineScripts(ctx, "progress", progressScript, len(groups), func(i int) ([]string, []any) {
		g := groups[i]
		return []string{q.keys.GroupMeta(g), q.keys.GroupProgress(g)}, []any{now, ProgressKeep, ms(ProgressMinGap)}
	})
	return err
}

// Progress returns a group's progress samples, newest first (none when it
// has none).
func (q *Queue) Progress(ctx context.Context, g contracts.GroupRef) ([]ProgressSample, error) {
	if q.sharded() {
		return q.For(g.Tenant).Progress(ctx, g)
	}
	raw, err := q.rdb.LRange(ctx, q.keys.GroupProgress(g), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: progress of %s: %w", g, err)
	}
	return parseProgress(raw), nil
}

// parseProgress reads "<ms>:<count>" entries, skipping malformed ones.
func parseProgress(raw []string) []ProgressSample {
	out := make([]ProgressSample, 0, len(raw))
	for _, r := range raw {
		a, b, ok := strings.Cut(r, ":")
		if !ok {
			continue
		}
		at, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, ProgressSample{AtMs: at, Count: n})
	}
	return out
}
