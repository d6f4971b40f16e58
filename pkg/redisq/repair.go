package redisq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// DefaultGroupIdleTTL is how long an unsealed group may go without activity
// before [Queue.AbandonIdle] abandons it: a week, as long as an ended
// group's keys are kept (GROUP_TTL), far beyond any producer's retries or
// outage, and short enough that forgotten groups do not pile up.
const DefaultGroupIdleTTL = 7 * 24 * time.Hour

// Repair reasons ([Repair.Reasons]), the label values of
// bulk_action_groups_repaired_total{reason}.
const (
	// RepairLease: leased jobs nobody would re-publish (no entry in the
	// inflight ZSET) were handed to the dispatcher's reclaim.
	RepairLease = "lease"
	// RepairQueue: a group with jobs to admit was missing from the fair
	// queue (its tenant's ZSET or the level) and was queued again.
	RepairQueue = "queue"
	// RepairInFlight: a group's in-flight count was above its jobs really
	// in flight (slots leaked) and was set to them.
	RepairInFlight = "inflight"
	// RepairComplete: a sealed group whose every job had ended was not
	// COMPLETED, and now is.
	RepairComplete = "complete"
)

// RepairReasons lists every repair reason.
var RepairReasons = []string{RepairLease, RepairQueue, RepairInFlight, RepairComplete}

// Repair is what [Queue.RepairGroup] did to a group.
type Repair struct {
	Group contracts.GroupRef
	// Leases counts the leased jobs handed to the reclaim.
	Leases int64
	// Suspected counts the running jobs first seen without a live claim:
	// a later repair re-leases each of them once [Config.ClaimTTL] has
	// passed without a renewal and the results published before are
	// recorded ([ResultsSettledThrough]).
	Suspected int64
	// Held counts the running jobs whose claims live: their workers have
	// them in hand (running long, waiting for a slot, or with a result on
	// the way), so the group's silence is no sign of trouble.
	Held int64
	// Requeued: the group was queued again.
	Requeued bool
	// FreedSlots counts the in-flight slots that had leaked.
	FreedSlots int64
	// Completed: the group was completed.
	Completed bool
	// Counts are the group's counts after the repair (read after it).
	Counts GroupCounts
}

// Reasons returns the repairs made, as [RepairReasons] values; none when
// the group needed none.
func (r *Repair) Reasons() []string {
	var out []string
	if r.Leases > 0 {
		out = append(out, RepairLease)
	}
	if r.Requeued {
		out = append(out, RepairQueue)
	}
	if r.FreedSlots > 0 {
		out = append(out, RepairInFlight)
	}
	if r.Completed {
		out = append(out, RepairComplete)
	}
	return out
}

var (
	repairScript  = loadScript("repair")
	abandonScript = loadScript("abandon")
)

func init() {
	allScripts["repair"] = repairScript
	allScripts["abandon"] = abandonScript
}

// RepairGroup repairs a group that makes no progress (docs/ARCHITECTURE.md
// §6.5; see lua/repair.lua): it completes a sealed group whose jobs have all
// ended, queues again a group with jobs to admit that the fair queue lost,
// hands leased jobs without a lease entry to the dispatcher's reclaim (which
// re-publishes them), and gives back in-flight slots that leaked. It works
// in bounded steps of at most [DefaultSweepChunk] job ids ([SweepChunk]). A
// group that ended, or needs nothing, is left as it is.
func (q *Queue) RepairGroup(ctx context.Context, g contracts.GroupRef, opts ...SweepOption) (*Repair, error) {
	if q.sharded() {
		return q.For(g.Tenant).RepairGroup(ctx, g, opts...)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: repair %s: %w", g, err)
	}
	o := sweepOptionsOf(opts)
	keys := []string{q.keys.GroupMeta(g), q.keys.GroupJobs(g), q.keys.Inflight(), q.keys.GroupIDs(g), q.keys.Claims()}
	r := &Repair{Group: g}
	cursor, counted, v0 := "0", int64(0), ""
	for {
		v, err := q.run(ctx, "repair", repairScript, keys, q.keys.Prefix(), g.Tenant, g.ID, q.now(),
			secs(q.cfg.GroupTTL), q.cfg.Alpha, o.chunk, cursor, counted, v0, o.settled, ms(q.cfg.ClaimTTL))
		if err != nil {
			return nil, err
		}
		l := toList(v)
		cursor, counted, v0 = toStr(l[0]), toInt(l[1]), toStr(l[2])
		r.Leases += toInt(l[3])
		r.Requeued = r.Requeued || toInt(l[4]) == 1
		r.FreedSlots += toInt(l[5])
		r.Completed = r.Completed || toInt(l[6]) == 1
		r.Suspected += toInt(l[7])
		r.Held += toInt(l[8])
		if cursor == "0" {
			break
		}
	}
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return nil, err
	}
	if ok {
		r.Counts = info.GroupCounts
	}
	return r, nil
}

// AbandonIdle abandons the unsealed groups on the stuck watch list
// ([Keys.StuckWatch]) that are really idle for longer than idle
// (lua/abandon.lua): such a group leaves the watch list and every key of
// it, its job hashes included, gets the group TTL (Config.GroupTTL), so
// Redis does not keep a group nobody will seal. Really idle means no work
// and no activity: a group that is paused, or has jobs queued, backing off,
// leased or running, is never abandoned, however long it waits; activity is
// its creation, start, a recorded result, and a pause, resume or seal it
// took. idle <= 0 abandons nothing. It returns the groups abandoned; the job
// hashes are given their TTLs in bounded steps ([SweepChunk]). With several
// shards it goes through them at once and returns the groups of each shard
// in turn, with those of a shard that failed up to its error.
func (q *Queue) AbandonIdle(ctx context.Context, idle time.Duration, opts ...SweepOption) ([]contracts.GroupRef, error) {
	if idle <= 0 {
		return nil, nil
	}
	if q.sharded() {
		per := make([][]contracts.GroupRef, len(q.shards))
		err := q.eachShard(func(i int, s *Queue) (err error) {
			per[i], err = s.AbandonIdle(ctx, idle, opts...)
			return err
		})
		return slices.Concat(per...), err
	}
	watched, err := q.rdb.ZRange(ctx, q.keys.StuckWatch(), 0, -1).Result()
	if err != nil || len(watched) == 0 {
		return nil, err
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	pipe := q.rdb.Pipeline()
	metas := make([]*redis.SliceCmd, len(watched))
	for i, gk := range watched {
		metas[i] = pipe.HMGet(ctx, q.keys.GroupMeta(parseGroupKey(gk)), "status", "declaredTotal",
			"createdAt", "startedAt", "lastProgressAt", "pausedAt", "activeAt")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: abandon idle groups: %w", err)
	}
	o := sweepOptionsOf(opts)
	var out []contracts.GroupRef
	for i, gk := range watched {
		v := metas[i].Val()
		if v[0] == nil || v[1] != nil || v[0] == string(contracts.StatePaused) {
			continue // gone, or sealed (StuckGroups and the stuck check deal with it), or paused
		}
		var last int64
		for _, x := range v[2:] {
			last = max(last, metaInt(x))
		}
		if now-last <= ms(idle) {
			continue
		}
		g := parseGroupKey(gk)
		cursor := "0"
		for {
			r, err := q.run(ctx, "abandon", abandonScript,
				[]string{q.keys.GroupMeta(g), q.keys.GroupIDs(g), q.keys.StuckWatch()},
				q.keys.Prefix(), gk, q.now(), ms(idle), o.chunk, cursor, secs(q.cfg.GroupTTL))
			if err != nil {
				return out, err
			}
			l := toList(r)
			if toStr(l[0]) != "abandoned" {
				break
			}
			if cursor = toStr(l[1]); cursor == "0" {
				out = append(out, g)
				break
			}
		}
	}
	return out, nil
}
