package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/schedule"
)

// Schedules (docs/ARCHITECTURE.md §5): a group's notBefore is kept in its
// meta as Unix ms (notBefore); its sending windows as their JSON (windows)
// and, for admission, as the intervals they are open from now on (winAt,
// "open,close,..." Unix ms: [schedule.Encode]). Admission (admit.lua) reads
// only those numbers, with the script's clock; the intervals are computed
// here, in Go, from the time zone database, and refreshed by
// [Queue.RefreshWindows] before they run out.

// ScheduleWait is the ZSET of groups admission passed by for their
// notBefore or sending windows (member "<tenant>:<gid>"), scored by when
// to look at them again (ms). They keep their place in the fair queue
// (parkedScore) meanwhile.
func (k Keys) ScheduleWait() string { return k.prefix + "schedule:wait" }

// ScheduleWindows is the ZSET of groups with sending windows (member
// "<tenant>:<gid>"), scored by when their open intervals (meta winAt) are
// to be computed again (ms).
func (k Keys) ScheduleWindows() string { return k.prefix + "schedule:windows" }

// TenantWindows is the HASH of tenants' default sending windows (field:
// tenant, value: the windows' JSON), given to each group the tenant creates
// without windows of its own.
func (k Keys) TenantWindows() string { return k.prefix + "tenant-windows" }

// windowRefreshMax is the longest a group's open intervals go without
// being computed again (they cover [schedule.Horizon]).
const windowRefreshMax = 6 * time.Hour

// scheduleArgs are the enqueue script's arguments for a new group's
// schedule: notBefore ms, the windows' JSON, their intervals and when to
// compute them again ("" each when not set).
func scheduleArgs(s contracts.GroupSettings, now time.Time) (nb, windows, winAt, refresh string, err error) {
	if s.NotBefore != "" {
		t, err := contracts.ParseNotBefore(s.NotBefore)
		if err != nil {
			return "", "", "", "", err
		}
		nb = strconv.FormatInt(t.UnixMilli(), 10)
	}
	if len(s.Windows) > 0 {
		windows, winAt, refresh, err = windowArgs(s.Windows, now)
	}
	return nb, windows, winAt, refresh, err
}

// windowArgs returns the JSON of ws, their open intervals from now and
// when to compute them again.
func windowArgs(ws []contracts.Window, now time.Time) (windows, winAt, refresh string, err error) {
	ivs, err := schedule.Intervals(ws, now, 0, 0)
	if err != nil {
		return "", "", "", err
	}
	b, err := json.Marshal(ws)
	if err != nil {
		return "", "", "", err
	}
	next := now.Add(windowRefreshMax)
	if len(ivs) > 0 && ivs[0].Close.Before(next) {
		next = ivs[0].Close
	}
	if len(ivs) == 0 {
		ivs = []schedule.Interval{{Open: time.UnixMilli(0), Close: time.UnixMilli(0)}}
	}
	return string(b), schedule.Encode(ivs), strconv.FormatInt(max(next.UnixMilli(), now.UnixMilli()+1000), 10), nil
}

// decodeWindows reads the windows' JSON a group meta keeps.
func decodeWindows(s string) ([]contracts.Window, error) {
	if s == "" {
		return nil, nil
	}
	var ws []contracts.Window
	if err := json.Unmarshal([]byte(s), &ws); err != nil {
		return nil, fmt.Errorf("redisq: windows %q: %w", s, err)
	}
	return ws, nil
}

// RefreshWindowsBatch is the most groups one [Queue.RefreshWindows] call
// computes the intervals of.
const RefreshWindowsBatch = 100

// RefreshWindows computes again the open intervals of the groups with
// sending windows whose intervals are due (at most [RefreshWindowsBatch]
// of them), from the time of Redis, and takes ended or gone groups off the
// list. It returns how many groups it refreshed. The fetchers call it
// about every second; a group created with its tenant's default windows
// gets its first intervals from it. With several shards it refreshes up to
// [RefreshWindowsBatch] groups of each shard, the shards at once, and
// returns their sum.
func (q *Queue) RefreshWindows(ctx context.Context) (int, error) {
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int, error) { return s.RefreshWindows(ctx) })
	}
	nowMs, err := q.clockMs(ctx)
	if err != nil {
		return 0, err
	}
	now := time.UnixMilli(nowMs)
	due, err := q.rdb.ZRangeByScore(ctx, q.keys.ScheduleWindows(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(nowMs, 10), Count: RefreshWindowsBatch}).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: refresh windows: %w", err)
	}
	n := 0
	for _, gk := range due {
		g := parseGroupKey(gk)
		raw, err := q.rdb.HGet(ctx, q.keys.GroupMeta(g), "windows").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return n, fmt.Errorf("redisq: refresh windows of %s: %w", g, err)
		}
		ws, derr := decodeWindows(raw)
		winAt, refresh := "", "0"
		if derr == nil && len(ws) > 0 {
			_, winAt, refresh, derr = windowArgs(ws, now)
		}
		if derr != nil {
			// windows that cannot be read again (a zone the binary does
			// not know): the group stays held, and it is said once a round
			q.rdb.ZAdd(ctx, q.keys.ScheduleWindows(), redis.Z{Score: float64(nowMs + windowRefreshMax.Milliseconds()), Member: gk})
			return n, fmt.Errorf("redisq: refresh windows of %s: %w", g, derr)
		}
		v, err := q.run(ctx, "schedule_refresh", scheduleRefreshScript,
			[]string{q.keys.GroupMeta(g), q.keys.ScheduleWindows()}, gk, raw, winAt, refresh)
		if err != nil {
			return n, err
		}
		n += int(toInt(v))
	}
	return n, nil
}

// TenantWindows returns a tenant's default sending windows (nil: none).
func (q *Queue) TenantWindows(ctx context.Context, tenant string) ([]contracts.Window, error) {
	if q.sharded() {
		return q.For(tenant).TenantWindows(ctx, tenant)
	}
	raw, err := q.rdb.HGet(ctx, q.keys.TenantWindows(), tenant).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisq: tenant windows: %w", err)
	}
	return decodeWindows(raw)
}

// Schedule is what a group's schedule says at a time.
type Schedule struct {
	// NotBefore is the group's notBefore (zero: none).
	NotBefore time.Time
	// Windows are the group's sending windows (none: always open).
	Windows []contracts.Window
	// HeldUntil is when the group may next be admitted, when it may not be
	// now (zero: it may be now), and Reason why: [HoldScheduled] before its
	// notBefore, [HoldOutsideWindow] outside its windows.
	HeldUntil time.Time
	Reason    HoldReason
}

// scheduleOf reads a group's schedule from its meta fields notBefore,
// windows and winAt, at nowMs, the way admit.lua's sched_until does.
func scheduleOf(nb, windows, winAt string, nowMs int64) (Schedule, error) {
	var s Schedule
	var t int64 = nowMs
	if nb != "" {
		v, err := strconv.ParseInt(nb, 10, 64)
		if err != nil {
			return s, fmt.Errorf("redisq: notBefore %q: %w", nb, err)
		}
		s.NotBefore = time.UnixMilli(v)
		if v > t {
			t = v
			s.Reason = HoldScheduled
		}
	}
	ws, err := decodeWindows(windows)
	if err != nil {
		return s, err
	}
	s.Windows = ws
	if winAt != "" {
		ivs, err := schedule.Decode(winAt)
		if err != nil {
			return s, err
		}
		open, at := schedule.Next(ivs, time.UnixMilli(t))
		switch {
		case !open && at.IsZero():
			t = max(t, nowMs+1000)
			if s.Reason == "" {
				s.Reason = HoldOutsideWindow
			}
		case !open:
			t = at.UnixMilli()
			if s.Reason == "" {
				s.Reason = HoldOutsideWindow
			}
		}
	}
	if t > nowMs {
		s.HeldUntil = time.UnixMilli(t)
	} else {
		s.Reason = ""
	}
	return s, nil
}

// GroupSchedule returns a group's schedule now (by the clock of Redis);
// the zero Schedule for a group without one or an unknown group.
func (q *Queue) GroupSchedule(ctx context.Context, g contracts.GroupRef) (Schedule, error) {
	if q.sharded() {
		return q.For(g.Tenant).GroupSchedule(ctx, g)
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return Schedule{}, err
	}
	v, err := q.rdb.HMGet(ctx, q.keys.GroupMeta(g), "notBefore", "windows", "winAt").Result()
	if err != nil {
		return Schedule{}, fmt.Errorf("redisq: schedule of %s: %w", g, err)
	}
	str := func(x any) string { s, _ := x.(string); return s }
	return scheduleOf(str(v[0]), str(v[1]), str(v[2]), now)
}

// ScheduleWaiting returns the groups admission passed by for their
// notBefore or sending windows ([Keys.ScheduleWait]): they are out of
// their tenants' queues until then, so [Queue.CandidateGroups] lists only
// those that have started. With several shards it lists the groups of
// each shard in turn.
func (q *Queue) ScheduleWaiting(ctx context.Context) ([]contracts.GroupRef, error) {
	if q.sharded() {
		per := make([][]contracts.GroupRef, len(q.shards))
		if err := q.eachShard(func(i int, s *Queue) (err error) {
			per[i], err = s.ScheduleWaiting(ctx)
			return err
		}); err != nil {
			return nil, err
		}
		return slices.Concat(per...), nil
	}
	gks, err := q.rdb.ZRange(ctx, q.keys.ScheduleWait(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: schedule waiting: %w", err)
	}
	out := make([]contracts.GroupRef, len(gks))
	for i, gk := range gks {
		out[i] = parseGroupKey(gk)
	}
	return out, nil
}

// KeptPosition returns the 1-based place a group passed by for its
// schedule (or paused, or at its in-flight limit) takes back in its
// tenant's queue of the level when it returns: one after the groups
// waiting there with a smaller score than the one it kept (parkedScore);
// 0 when it kept none.
func (q *Queue) KeptPosition(ctx context.Context, g contracts.GroupRef, level contracts.Priority) (int64, error) {
	if q.sharded() {
		return q.For(g.Tenant).KeptPosition(ctx, g, level)
	}
	v, err := q.rdb.HGet(ctx, q.keys.GroupMeta(g), "parkedScore").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisq: kept position of %s: %w", g, err)
	}
	n, err := q.rdb.ZCount(ctx, q.keys.TenantGroups(g.Tenant, level.OrDefault()), "-inf", "("+v).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: kept position of %s: %w", g, err)
	}
	return n + 1, nil
}

// Reschedule outcomes ([ControlResult.Outcome] of [Queue.Reschedule];
// also [ControlEnded], [ControlUnknown] and [ControlSuperseded]).
const (
	// Rescheduled: the group's notBefore is the new one.
	Rescheduled ControlOutcome = "rescheduled"
	// ControlStarted: the group has started (jobs of it were admitted);
	// its notBefore no longer matters and is left as it was.
	ControlStarted ControlOutcome = "started"
)

// Reschedule moves the notBefore of a group that has not started, earlier
// or later (a past time lets it start at once). With [SubmitSeq], a move
// older than the last one the group took changes nothing
// ([ControlSuperseded]).
func (q *Queue) Reschedule(ctx context.Context, g contracts.GroupRef, notBefore time.Time, opts ...ControlOption) (*ControlResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Reschedule(ctx, g, notBefore, opts...)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: reschedule %s: %w", g, err)
	}
	v, err := q.run(ctx, "reschedule", rescheduleScript, []string{q.keys.GroupMeta(g), q.keys.ScheduleWait()},
		groupKey(g), notBefore.UnixMilli(), q.now(), controlSeq(opts))
	if err != nil {
		return nil, err
	}
	return parseControl(v), nil
}
