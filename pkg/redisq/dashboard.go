package redisq

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TenantTypesMax is the most job types a tenant's type index
// ([Keys.TenantTypes]) keeps: accepting a job of a new type beyond it
// drops the type accepted longest ago.
const TenantTypesMax = 1000

// TenantTypes is the ZSET of the job types a tenant submitted, scored by
// when a job of the type was last accepted (ms), the newest
// [TenantTypesMax] of them; written by enqueue.lua. The dashboard shows a
// tenant the worker types of its own jobs only ([Queue.ReadDashboard]).
func (k Keys) TenantTypes(tenant string) string { return k.prefix + "tenant:" + tenant + ":types" }

// dashboardBatch is the most groups whose counters one pipeline of
// [Queue.ReadDashboard] reads.
const dashboardBatch = 1000

// Dashboard is every figure the dashboard shows, for every tenant, read at
// one moment ([Queue.ReadDashboard]).
type Dashboard struct {
	// AtMs is the time the figures were read (the scripts' clock).
	AtMs int64
	// Active are the tenants sharing the global limit now.
	Active []string
	// Weights holds the tenants' weights as stored (absent = 1).
	Weights map[string]string
	// NonReady is the size of the backoff (non-ready) queue.
	NonReady int64
	// Tenants holds every tenant that is active, has a weight, or has
	// active groups or queued jobs; any other tenant has zero counts
	// ([Dashboard.Tenant]).
	Tenants map[string]*TenantFigures
	// WorkerTypes are the job types workers announced, with when each
	// announcement expires (ms).
	WorkerTypes []WorkerType
	// ownQuotas is the tenant quotas HASH.
	ownQuotas map[string]string
	cfg       Config
}

// WorkerType is a job type workers announced ([Queue.AnnounceTypes]).
type WorkerType struct {
	Type    string
	UntilMs int64
}

// TenantFigures are one tenant's counts.
type TenantFigures struct {
	// ActiveGroups, QueuedJobs: its quota counts; InFlightJobs the jobs of
	// its active groups admitted and not finished; BackingOffJobs those in
	// the backoff queue.
	ActiveGroups, QueuedJobs, InFlightJobs, BackingOffJobs int64
	// Types are the job types it submitted jobs of within the window
	// ReadDashboard was given, sorted.
	Types []string
	// Destinations are the explicit destinations ([Keys.TenantDestinations])
	// its jobs used within that window, sorted; its types are its other
	// destinations.
	Destinations []string
	Quota        TenantQuota
}

// Tenant returns a tenant's figures: those read, or zero counts and its
// quotas for a tenant that has none.
func (d *Dashboard) Tenant(tenant string) TenantFigures {
	if f, ok := d.Tenants[tenant]; ok {
		return *f
	}
	return TenantFigures{Types: []string{}, Destinations: []string{}, Quota: d.quota(tenant, 0, 0)}
}

// quota is a tenant's quotas in force, with its counts.
func (d *Dashboard) quota(tenant string, queued, groups int64) TenantQuota {
	limit := func(f string, def int64) (int64, bool) {
		s, ok := d.ownQuotas[tenant+":"+f]
		return ownQuota(s, ok, def)
	}
	tq := TenantQuota{Tenant: tenant, QueuedJobs: queued, ActiveGroups: groups}
	tq.MaxQueuedJobs, tq.OwnQueuedJobs = limit(QuotaQueuedJobs.field(), d.cfg.TenantMaxQueuedJobs)
	tq.MaxActiveGroups, tq.OwnActiveGroups = limit(QuotaActiveGroups.field(), d.cfg.TenantMaxActiveGroups)
	return tq
}

// ReadDashboard reads the dashboard's figures of every tenant: in-flight
// jobs counted over every active group (jobs - done - cancelled - queued -
// backing off, per group, as the group views count them), and each
// tenant's job types and explicit destinations used within the last
// typesWithinMs. It reads
// Redis in three round trips plus one per [dashboardBatch] active groups,
// changes nothing, and is meant to be read once and shared by every
// viewer. With shards it reads every shard so (concurrently, at one AtMs)
// and merges: Active gathered shard after shard, Weights, Tenants and the
// tenants' quotas merged (each tenant's from its shard), NonReady summed,
// WorkerTypes read once from the cross-shard keys.
func (q *Queue) ReadDashboard(ctx context.Context, typesWithinMs int64) (*Dashboard, error) {
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	if !q.sharded() {
		return q.readDashboard(ctx, typesWithinMs, now, true)
	}
	parts, err := gather(q, func(s *Queue) (*Dashboard, error) { return s.readDashboard(ctx, typesWithinMs, now, false) })
	if err != nil {
		return nil, err
	}
	d := &Dashboard{AtMs: now, Weights: map[string]string{}, Tenants: map[string]*TenantFigures{},
		ownQuotas: map[string]string{}, cfg: q.cfg}
	if d.WorkerTypes, err = q.workerTypes(ctx); err != nil {
		return nil, err
	}
	for _, p := range parts {
		d.Active = append(d.Active, p.Active...)
		d.NonReady += p.NonReady
		maps.Copy(d.Weights, p.Weights)
		maps.Copy(d.Tenants, p.Tenants)
		maps.Copy(d.ownQuotas, p.ownQuotas)
	}
	return d, nil
}

// workerTypes reads the worker type announcements (cross-shard keys).
func (q *Queue) workerTypes(ctx context.Context) ([]WorkerType, error) {
	zs, err := q.rdb.ZRangeWithScores(ctx, q.g().keys.WorkerTypes(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: dashboard: %w", err)
	}
	var out []WorkerType
	for _, z := range zs {
		t, _ := z.Member.(string)
		out = append(out, WorkerType{Type: t, UntilMs: int64(z.Score)})
	}
	return out, nil
}

// readDashboard is ReadDashboard on q's own keys at now, with the worker
// types when workers is set.
func (q *Queue) readDashboard(ctx context.Context, typesWithinMs, now int64, workers bool) (*Dashboard, error) {
	d := &Dashboard{AtMs: now, Tenants: map[string]*TenantFigures{}, cfg: q.cfg}
	k := q.keys
	pipe := q.rdb.Pipeline()
	active := pipe.SMembers(ctx, k.ActiveTenants())
	weights := pipe.HGetAll(ctx, k.TenantWeights())
	quotaTenants := pipe.SMembers(ctx, k.QuotaTenants())
	own := pipe.HGetAll(ctx, k.TenantQuotas())
	nonReady := pipe.ZCard(ctx, k.NonReadyQueue())
	var workerTypes *redis.ZSliceCmd
	if workers {
		workerTypes = pipe.ZRangeWithScores(ctx, q.g().keys.WorkerTypes(), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: dashboard: %w", err)
	}
	d.Active, d.Weights, d.NonReady, d.ownQuotas = active.Val(), weights.Val(), nonReady.Val(), own.Val()
	if workerTypes != nil {
		for _, z := range workerTypes.Val() {
			t, _ := z.Member.(string)
			d.WorkerTypes = append(d.WorkerTypes, WorkerType{Type: t, UntilMs: int64(z.Score)})
		}
	}
	tenants := slices.Concat(d.Active, quotaTenants.Val())
	for t := range d.Weights {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	tenants = slices.Compact(tenants)
	tenants = slices.DeleteFunc(tenants, func(t string) bool { return contracts.ValidateTenant(t) != nil })
	if len(tenants) == 0 {
		return d, nil
	}
	type tenantCmds struct {
		groups  *redis.StringSliceCmd
		queued  *redis.StringCmd
		backoff *redis.StringCmd
		types   *redis.StringSliceCmd
		dests   *redis.StringSliceCmd
	}
	tcs := make([]tenantCmds, len(tenants))
	pipe = q.rdb.Pipeline()
	since := "-inf"
	if typesWithinMs > 0 {
		since = strconv.FormatInt(now-typesWithinMs, 10)
	}
	for i, t := range tenants {
		within := &redis.ZRangeBy{Min: since, Max: "+inf"}
		tcs[i] = tenantCmds{pipe.SMembers(ctx, k.TenantActiveGroups(t)), pipe.Get(ctx, k.TenantQueuedJobs(t)),
			pipe.Get(ctx, k.TenantNonReady(t)), pipe.ZRangeByScore(ctx, k.TenantTypes(t), within),
			pipe.ZRangeByScore(ctx, k.TenantDestinations(t), within)}
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: dashboard: %w", err)
	}
	type groupRef struct {
		g contracts.GroupRef
		f *TenantFigures
	}
	var refs []groupRef
	for i, t := range tenants {
		groups := tcs[i].groups.Val()
		queued := max(metaInt(tcs[i].queued.Val()), 0)
		f := &TenantFigures{ActiveGroups: int64(len(groups)), QueuedJobs: queued,
			BackingOffJobs: max(metaInt(tcs[i].backoff.Val()), 0), Types: tcs[i].types.Val(),
			Destinations: tcs[i].dests.Val(), Quota: d.quota(t, queued, int64(len(groups)))}
		slices.Sort(f.Types)
		slices.Sort(f.Destinations)
		d.Tenants[t] = f
		for _, id := range groups {
			refs = append(refs, groupRef{contracts.GroupRef{Tenant: t, ID: id}, f})
		}
	}
	// the active groups' counters, dashboardBatch groups a round trip
	type groupCmds struct {
		meta    *redis.SliceCmd
		pending *redis.IntCmd
		backoff *redis.StringCmd
	}
	for start := 0; start < len(refs); start += dashboardBatch {
		batch := refs[start:min(start+dashboardBatch, len(refs))]
		cs := make([]groupCmds, len(batch))
		pipe := q.rdb.Pipeline()
		for j, r := range batch {
			cs[j] = groupCmds{pipe.HMGet(ctx, k.GroupMeta(r.g), "totalJobs", "doneJobs", "cancelledCount"),
				pipe.LLen(ctx, k.GroupJobs(r.g)), pipe.Get(ctx, k.CongestionCount(r.g))}
		}
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return nil, fmt.Errorf("redisq: dashboard: %w", err)
		}
		for j, c := range cs {
			v := c.meta.Val()
			batch[j].f.InFlightJobs += max(metaInt(v[0])-metaInt(v[1])-metaInt(v[2])-c.pending.Val()-metaInt(c.backoff.Val()), 0)
		}
	}
	return d, nil
}
