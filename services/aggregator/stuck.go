package aggregator

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/telemetry"
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
	var settled resultsSettled
	loop.Every(ctx, a.cfg.StuckCheckEvery, func(ctx context.Context) {
		a.checkStuck(ctx, warned, settled.update(ctx, a))
	}, loop.AfterRun())
}

// settled is the time through which RESULT is settled (resultsSettled).
func (a *Aggregator) checkStuck(ctx context.Context, warned map[contracts.GroupRef]time.Time, settled time.Time) {
	a.maintain(ctx)
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
		// Repair first (docs/ARCHITECTURE.md §6.5), at most once per
		// StuckAfter per group, like the warning.
		r, repaired := a.repair(ctx, g.Group, settled)
		if repaired {
			continue
		}
		if r != nil && r.Held > 0 && r.Suspected == 0 && g.Pending == 0 && g.NonReady == 0 {
			// its jobs are in their workers' hands: running long, or
			// results on the way
			a.log.Info("group without progress while its workers hold its jobs", "tenant", g.Group.Tenant, "group", g.Group.ID,
				"held", r.Held)
			continue
		}
		if !g.Sealed() && g.Pending == 0 && g.NonReady == 0 && g.Jobs == g.Done+g.Cancelled {
			// nothing outstanding: it waits for more jobs or its seal, and
			// is abandoned after GroupIdleTTL
			continue
		}
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

// repair repairs one stuck group ([redisq.Queue.RepairGroup]), counts and
// logs what it repaired, and publishes the event of a group it completed.
// Running jobs are re-leased only when their claims expired before settled
// (resultsSettled). It returns what the repair found (nil when it failed)
// and whether anything was repaired.
func (a *Aggregator) repair(ctx context.Context, g contracts.GroupRef, settled time.Time) (*redisq.Repair, bool) {
	r, err := a.d.Queue.RepairGroup(ctx, g, redisq.ResultsSettledThrough(settled))
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("repair of a stuck group failed", "tenant", g.Tenant, "group", g.ID, "err", err)
		}
		return nil, false
	}
	if r.Suspected > 0 {
		a.log.Info("running jobs without a live claim: re-published once their claims stay expired for a claim TTL and RESULT is settled",
			"tenant", g.Tenant, "group", g.ID, "jobs", r.Suspected)
	}
	reasons := r.Reasons()
	if len(reasons) == 0 {
		return r, false
	}
	for _, reason := range reasons {
		a.d.Metrics.GroupsRepaired.WithLabelValues(reason).Inc()
	}
	a.log.Warn("repaired a group without progress", "tenant", g.Tenant, "group", g.ID, "repairs", strings.Join(reasons, ","),
		"leases", r.Leases, "freedSlots", r.FreedSlots, "state", string(r.Counts.State))
	if r.Completed {
		a.publishEvent(ctx, g, r.Counts, true)
	}
	return r, true
}

// maintain finishes cancels cut short, prunes expired claims and the index
// entries of expired groups (a bounded step each time) and abandons
// unsealed groups idle for GroupIdleTTL, before each stuck check.
func (a *Aggregator) maintain(ctx context.Context) {
	done, err := a.d.Queue.FinishCancels(ctx, maxSweepsPerCheck)
	for _, c := range done {
		a.d.Metrics.GroupsRepaired.WithLabelValues(telemetry.RepairCancel).Inc()
		a.log.Info("finished a cancel cut short", "tenant", c.Group.Tenant, "group", c.Group.ID, "dropped", c.Dropped)
		a.publishEvent(ctx, c.Group, c.Counts, false) // it ended with its cancel's first step
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("finishing cancels failed", "err", err)
	}
	if _, err := a.d.Queue.PruneClaims(ctx); err != nil && ctx.Err() == nil {
		a.log.Warn("pruning expired claims failed", "err", err)
	}
	if _, err := a.d.Queue.PruneGroupIndexes(ctx, 0); err != nil && ctx.Err() == nil {
		a.log.Warn("pruning the group indexes of expired groups failed", "err", err)
	}
	gone, err := a.d.Queue.AbandonIdle(ctx, a.cfg.GroupIdleTTL)
	for _, g := range gone {
		a.d.Metrics.GroupsRepaired.WithLabelValues(telemetry.RepairAbandoned).Inc()
		a.log.Info("abandoned an unsealed group without activity; its keys expire", "tenant", g.Tenant, "group", g.ID,
			"idle", a.cfg.GroupIdleTTL.String())
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("abandoning idle groups failed", "err", err)
	}
}

// maxSweepsPerCheck bounds the cancels one stuck check finishes.
const maxSweepsPerCheck = 100

// publishEvent publishes the event of a group the stuck check ended (ended)
// or whose counts it changed after its end.
func (a *Aggregator) publishEvent(ctx context.Context, g contracts.GroupRef, c redisq.GroupCounts, ended bool) {
	a.publishMu.Lock()
	defer a.publishMu.Unlock()
	if err := a.d.Events.Publish(ctx, events.Change{Group: g, Counts: c, Ended: ended}); err != nil && ctx.Err() == nil {
		a.log.Warn("event of a repaired group not published", "tenant", g.Tenant, "group", g.ID, "err", err)
	}
}
