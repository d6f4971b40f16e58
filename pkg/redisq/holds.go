package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// HoldReason names what keeps a group's jobs from being admitted or
// released now (docs/ARCHITECTURE.md §5, "why is it waiting").
type HoldReason string

// Hold reasons, in the order [Queue.Holds] reports them.
const (
	// HoldPaused: the group is PAUSED; nothing of it is admitted until it
	// is resumed.
	HoldPaused HoldReason = "paused"
	// HoldScheduled: the group's notBefore has not come; UntilMs is when
	// it may start (its notBefore, or its sending windows' next opening
	// after it).
	HoldScheduled HoldReason = "scheduled"
	// HoldOutsideWindow: none of the group's sending windows is open;
	// UntilMs is when the next one opens. Jobs in flight finish.
	HoldOutsideWindow HoldReason = "outside_window"
	// HoldInFlightLimit: jobs are queued, but the group's admitted and
	// unfinished jobs are at its maxInFlight.
	HoldInFlightLimit HoldReason = "in_flight_limit"
	// HoldRateShare: jobs are queued, and the group's tenant has used its
	// share of the current rate window. In the paced mode the rest of the
	// window may still be handed to it once every waiting tenant has used
	// its share (work-conserving).
	HoldRateShare HoldReason = "rate_share_used"
	// HoldGlobalRate: jobs are queued, and the global limit of the current
	// rate window is used up.
	HoldGlobalRate HoldReason = "global_rate"
	// HoldNoWorker: the type of the group's next queued job has no live
	// worker ([Queue.LiveTypes]).
	HoldNoWorker HoldReason = "no_worker"
	// HoldTypeRate: the type of the group's next queued job has used up its
	// own rate limit (Config.TypeLimits) for the current window.
	HoldTypeRate HoldReason = "type_rate"
	// HoldDestinationRate: with the adaptive rate on
	// ([AdaptiveConfig.Enabled]), the destination of the group's next
	// queued job (its explicit one, else its type: [Hold.Type] names it)
	// has used up its learned rate for the current
	// window, or is stopped by a Retry-After (until then).
	HoldDestinationRate HoldReason = "destination_rate"
	// HoldReadyFull: READY has no room left for the type of the group's
	// next queued job (reported only when the caller measured READY's room,
	// [HoldOptions.Room]).
	HoldReadyFull HoldReason = "ready_full"
	// HoldBackingOff: jobs of the group wait in the non-ready queue until
	// they are due.
	HoldBackingOff HoldReason = "backing_off"
)

// HoldReasons lists every hold reason in the order [Queue.Holds] reports
// them. Tenant quotas are not among them: they refuse a submission (it is
// dead-lettered as over_quota) rather than hold a group.
var HoldReasons = []HoldReason{
	HoldPaused, HoldScheduled, HoldOutsideWindow, HoldInFlightLimit, HoldRateShare, HoldGlobalRate, HoldNoWorker, HoldTypeRate,
	HoldDestinationRate, HoldReadyFull, HoldBackingOff,
}

// Hold is one reason a group waits.
type Hold struct {
	Reason HoldReason
	// UntilMs is when the hold lifts, when known (0 otherwise): the end of
	// the rate window (HoldRateShare, HoldGlobalRate), or when the group's
	// earliest backed-off job is due (HoldBackingOff with
	// [HoldOptions.NextDue]; see AtLeast).
	UntilMs int64
	// AtLeast says UntilMs is only a lower bound: none of the group's jobs
	// was among the first [NextDueScan] entries of the non-ready queue.
	AtLeast bool
	// Count is the jobs in flight (HoldInFlightLimit), the jobs admitted in
	// the window (HoldRateShare: the tenant's, HoldGlobalRate: all), or the
	// group's jobs in the non-ready queue (HoldBackingOff).
	Count int64
	// Limit is the group's maxInFlight (HoldInFlightLimit), the tenant's
	// share of the window (HoldRateShare) or the global limit
	// (HoldGlobalRate).
	Limit int64
	// Type is the job type of the group's next queued job (HoldNoWorker,
	// HoldReadyFull).
	Type string
	// Tenant is the group's tenant (HoldRateShare).
	Tenant string
	// Rate is the destination's learned rate in jobs/s
	// (HoldDestinationRate).
	Rate float64
}

// HoldOptions are the optional inputs of [Queue.Holds].
type HoldOptions struct {
	// Room is READY's free room per job type, when the caller measured it;
	// a type not in it has RoomOther. Nil means READY's room is unknown,
	// and HoldReadyFull is not reported.
	Room map[string]int
	// RoomOther is the room of a type not in Room.
	RoomOther int
	// NextDue looks up, for each group with backed-off jobs, when its
	// earliest one is due ([Queue.NextDue]: a bounded scan of the non-ready
	// queue per group, so meant for a few groups, not for every one).
	NextDue bool
}

// Holds reports, for each group, what holds it back now, in the order of
// [HoldReasons]; a group running freely, an ended group and an unknown one
// have none. The reasons that concern admission (in-flight limit, rate,
// worker, READY room) are reported only for a group with queued jobs that
// is not paused, and the rate and worker ones only when it is not at its
// in-flight limit: they say why its next queued job is not admitted.
// HoldBackingOff is reported whenever the group has jobs in the non-ready
// queue. It reads Redis in three round trips whatever the number of
// groups, plus [Queue.NextDue]'s with opt.NextDue, and changes nothing.
// With several shards each group is read in its tenant's shard (the shards
// at once), whose part of the global limit and counts, its active tenants
// and its type limits are the ones its admission applies: HoldGlobalRate
// and HoldRateShare report those.
func (q *Queue) Holds(ctx context.Context, groups []contracts.GroupRef, opt HoldOptions) ([][]Hold, error) {
	out := make([][]Hold, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	if q.sharded() {
		idx := q.shardIndexes(len(groups), func(i int) string { return groups[i].Tenant })
		err := q.onShards(idx, func(s *Queue, ix []int) error {
			hs, err := s.Holds(ctx, pick(groups, ix), opt)
			if err != nil {
				return err
			}
			for j, i := range ix {
				out[i] = hs[j]
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	windowMs := ms(q.cfg.Window)
	window := now / windowMs
	windowEnd := (window + 1) * windowMs

	type groupCmds struct {
		meta     *redis.SliceCmd
		pending  *redis.IntCmd
		head     *redis.StringCmd
		nonReady *redis.StringCmd
		rec      *redis.StringCmd
		typ      *redis.SliceCmd // type, dest of the head job's hash
	}
	type tenantCmds struct{ count, weight *redis.StringCmd }
	pipe := q.rdb.Pipeline()
	cs := make([]groupCmds, len(groups))
	tenants := map[string]*tenantCmds{}
	for i, g := range groups {
		jobs := q.keys.GroupJobs(g)
		cs[i] = groupCmds{
			meta:     pipe.HMGet(ctx, q.keys.GroupMeta(g), "status", "maxInFlight", "inFlight", "notBefore", "winAt"),
			pending:  pipe.LLen(ctx, jobs),
			head:     pipe.LIndex(ctx, jobs, 0),
			nonReady: pipe.Get(ctx, q.keys.CongestionCount(g)),
		}
		if tenants[g.Tenant] == nil {
			tenants[g.Tenant] = &tenantCmds{
				count:  pipe.Get(ctx, q.keys.RateLimitTenant(g.Tenant, window)),
				weight: pipe.HGet(ctx, q.keys.TenantWeights(), g.Tenant),
			}
		}
	}
	globalCount := pipe.Get(ctx, q.keys.RateLimitGlobal(window))
	active := pipe.SCard(ctx, q.keys.ActiveTenants())
	// The live types as LiveTypes reads them, without its clean-up.
	liveCmd := pipe.ZRangeByScore(ctx, q.g().keys.WorkerTypes(), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(q.clockNow().UnixMilli(), 10), Max: "+inf"})
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: holds: %w", err)
	}

	// The type of each admissible group's next queued job.
	admissible := func(i int) bool {
		v := cs[i].meta.Val()
		st, _ := v[0].(string)
		return st != "" && st != string(contracts.StatePaused) && !contracts.GroupState(st).Terminal() &&
			cs[i].pending.Val() > 0 && cs[i].head.Val() != ""
	}
	pipe = q.rdb.Pipeline()
	n := 0
	for i, g := range groups {
		if admissible(i) {
			// its record while it has not left the list, else its hash
			cs[i].rec = pipe.HGet(ctx, q.keys.GroupQueued(g), cs[i].head.Val())
			cs[i].typ = pipe.HMGet(ctx, q.keys.Job(g, cs[i].head.Val()), "type", "dest")
			n++
		}
	}
	if n > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return nil, fmt.Errorf("redisq: holds: %w", err)
		}
	}

	live := liveCmd.Val()
	// the learned destination rates, with the adaptive rate on
	var learned *DestRates
	byDest := map[string]DestRate{}
	if q.cfg.Adaptive.Enabled {
		if learned, err = q.g().DestinationRates(ctx); err != nil {
			return nil, err
		}
		for _, d := range learned.Rates {
			byDest[d.Destination] = d
		}
	}
	gc, _ := globalCount.Int64()
	limit, act := int64(q.cfg.GlobalLimit), active.Val()
	for i, g := range groups {
		v := cs[i].meta.Val()
		st, _ := v[0].(string)
		state := contracts.GroupState(st)
		if st == "" || state.Terminal() {
			continue
		}
		var hs []Hold
		pending := cs[i].pending.Val()
		var sched *Hold // the group's schedule holds it (admit.lua sched_until)
		if nb, win := metaStr(v[3]), metaStr(v[4]); nb != "" || win != "" {
			if sc, err := scheduleOf(nb, "", win, now); err == nil && sc.Reason != "" {
				sched = &Hold{Reason: sc.Reason, UntilMs: sc.HeldUntil.UnixMilli()}
			}
		}
		switch maxIF, inFlight := metaInt(v[1]), metaInt(v[2]); {
		case state == contracts.StatePaused:
			hs = append(hs, Hold{Reason: HoldPaused})
			if sched != nil {
				hs = append(hs, *sched)
			}
		case pending == 0:
		case sched != nil:
			hs = append(hs, *sched)
		case maxIF > 0 && inFlight >= maxIF:
			hs = append(hs, Hold{Reason: HoldInFlightLimit, Count: inFlight, Limit: maxIF})
		default:
			t := tenants[g.Tenant]
			tc, _ := t.count.Int64()
			share := TenantShare(limit, act, ParseTenantWeight(t.weight.Val()))
			if tc >= share {
				hs = append(hs, Hold{Reason: HoldRateShare, UntilMs: windowEnd, Count: tc, Limit: share, Tenant: g.Tenant})
			}
			if gc >= limit {
				hs = append(hs, Hold{Reason: HoldGlobalRate, UntilMs: windowEnd, Count: gc, Limit: limit})
			}
			if cs[i].typ == nil {
				break
			}
			hv := cs[i].typ.Val()
			typ, dest := metaStr(hv[0]), metaStr(hv[1])
			if f, ok := decodeQueued(cs[i].rec.Val()); ok {
				typ, dest = f["type"], f["dest"]
			}
			if typ == "" {
				break
			}
			if !slices.Contains(live, typ) {
				hs = append(hs, Hold{Reason: HoldNoWorker, Type: typ})
			}
			if tl := int64(q.cfg.TypeLimits[typ]); tl > 0 {
				n, err := q.rdb.Get(ctx, q.keys.RateLimitType(typ, window)).Int64()
				if err != nil && !isNil(err) {
					return nil, fmt.Errorf("redisq: holds: %w", err)
				}
				if n >= tl {
					hs = append(hs, Hold{Reason: HoldTypeRate, UntilMs: windowEnd, Count: n, Limit: tl, Type: typ})
				}
			}
			// its destination: its explicit one, else its type
			if dest == "" {
				dest = typ
			} else if tl := int64(q.cfg.TypeLimits[dest]); tl > 0 {
				n, err := q.rdb.Get(ctx, q.keys.RateLimitType(dest, window)).Int64()
				if err != nil && !isNil(err) {
					return nil, fmt.Errorf("redisq: holds: %w", err)
				}
				if n >= tl {
					hs = append(hs, Hold{Reason: HoldTypeRate, UntilMs: windowEnd, Count: n, Limit: tl, Type: dest})
				}
			}
			if d, ok := byDest[dest]; ok {
				h, err := q.destinationHold(ctx, learned, d, window, windowEnd)
				if err != nil {
					return nil, err
				}
				if h != nil {
					hs = append(hs, *h)
				}
			}
			if opt.Room != nil {
				room, ok := opt.Room[typ]
				if !ok {
					room = opt.RoomOther
				}
				if room <= 0 {
					hs = append(hs, Hold{Reason: HoldReadyFull, Type: typ})
				}
			}
		}
		if nr, _ := strconv.ParseInt(cs[i].nonReady.Val(), 10, 64); nr > 0 {
			h := Hold{Reason: HoldBackingOff, Count: nr}
			if opt.NextDue {
				due, atLeast, err := q.NextDue(ctx, g)
				if err != nil {
					return nil, err
				}
				h.UntilMs, h.AtLeast = due, atLeast
			}
			hs = append(hs, h)
		}
		out[i] = hs
	}
	return out, nil
}

// destinationHold is the HoldDestinationRate of destination d, or nil
// when its learned rate does not hold it now: it is stopped, or its
// type's count in this window reached the learned limit, where that limit
// is below the type's own.
func (q *Queue) destinationHold(ctx context.Context, r *DestRates, d DestRate, window, windowEnd int64) (*Hold, error) {
	if r.Stopped(d) {
		return &Hold{Reason: HoldDestinationRate, UntilMs: d.StopUntilMs, Type: d.Destination, Rate: d.Rate}, nil
	}
	lim, ok := q.learnedPerWindow(r, d)
	if !ok {
		return nil, nil
	}
	if s := q.cfg.TypeLimits[d.Destination]; s > 0 && s <= lim {
		return nil, nil // the type's own limit holds it: HoldTypeRate
	}
	n, err := q.rdb.Get(ctx, q.keys.RateLimitType(d.Destination, window)).Int64()
	if err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: holds: %w", err)
	}
	if n < int64(lim) {
		return nil, nil
	}
	return &Hold{Reason: HoldDestinationRate, UntilMs: windowEnd, Count: n, Limit: int64(lim), Type: d.Destination, Rate: d.Rate}, nil
}

// NextDueScan is the most entries of the non-ready queue [Queue.NextDue]
// reads.
const NextDueScan = 10000

// nextDuePage is how many entries NextDue reads per round trip.
const nextDuePage = 1000

// NextDue returns when the group's earliest backed-off job is due (ms). The
// non-ready queue is one ZSET for every group, so it reads the queue in due
// order, a page at a time, until it meets one of the group's jobs; it reads
// at most [NextDueScan] entries. When the group's first job lies beyond
// them, dueMs is the due time of the last entry read and atLeast is true:
// the job is due no earlier. dueMs is 0 when the queue holds none of the
// group's jobs.
func (q *Queue) NextDue(ctx context.Context, g contracts.GroupRef) (dueMs int64, atLeast bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).NextDue(ctx, g)
	}
	prefix := groupKey(g) + ":"
	var last float64
	for start := int64(0); start < NextDueScan; start += nextDuePage {
		page, err := q.rdb.ZRangeWithScores(ctx, q.keys.NonReadyQueue(), start, start+nextDuePage-1).Result()
		if err != nil {
			return 0, false, fmt.Errorf("redisq: next due of %s: %w", g, err)
		}
		for _, z := range page {
			if m, _ := z.Member.(string); strings.HasPrefix(m, prefix) {
				return int64(z.Score), false, nil
			}
			last = z.Score
		}
		if len(page) < nextDuePage {
			return 0, false, nil
		}
	}
	return int64(last), true, nil
}
