package aggregator

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Stuck returns the groups that are RUNNING or AGGREGATING and have had no
// recorded result (or, before the first one, no start) for longer than
// Config.StuckAfter ([redisq.Queue.StuckGroups]). It also puts the groups
// with results recorded since the last call on the stuck watch list, so a
// group stays in view after it leaves the rate limiter's active set.
func (a *Aggregator) Stuck(ctx context.Context) ([]redisq.GroupInfo, error) {
	a.mu.Lock()
	progressed := slices.Collect(maps.Keys(a.progressed))
	clear(a.progressed)
	a.mu.Unlock()
	if err := a.d.Queue.WatchGroups(ctx, progressed...); err != nil {
		a.mu.Lock()
		for _, gid := range progressed {
			a.progressed[gid] = struct{}{}
		}
		a.mu.Unlock()
		return nil, err
	}
	return a.d.Queue.StuckGroups(ctx, a.cfg.StuckAfter)
}

// watchStuck runs the stuck check every Config.StuckCheckEvery until ctx
// ends, logging a warning per stuck group at most once per StuckAfter.
func (a *Aggregator) watchStuck(ctx context.Context) {
	warned := map[contracts.GroupRef]time.Time{}
	t := time.NewTimer(a.cfg.StuckCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.checkStuck(ctx, warned)
		t.Reset(a.cfg.StuckCheckEvery)
	}
}

func (a *Aggregator) checkStuck(ctx context.Context, warned map[contracts.GroupRef]time.Time) {
	groups, err := a.Stuck(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("stuck check failed", "err", err)
		}
		return
	}
	now := time.Now()
	stuck := make(map[contracts.GroupRef]bool, len(groups))
	for _, g := range groups {
		stuck[g.Group] = true
		if last, ok := warned[g.Group]; ok && now.Sub(last) < a.cfg.StuckAfter {
			continue
		}
		warned[g.Group] = now
		since := g.LastProgressAtMs
		if since == 0 {
			since = g.StartedAtMs
		}
		a.log.Warn("group stuck: no progress", "tenant", g.Group.Tenant, "group", g.Group.ID, "state", string(g.State),
			"for", now.Sub(time.UnixMilli(since)).Round(time.Second).String(),
			"total", g.Declared, "jobs", g.Jobs, "done", g.Done, "pending", g.Pending,
			"succeeded", g.Succeeded, "failed", g.Failed, "cancelled", g.Cancelled)
	}
	for gid := range warned {
		if !stuck[gid] {
			delete(warned, gid)
		}
	}
}
