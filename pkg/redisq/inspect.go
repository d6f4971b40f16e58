package redisq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// FairPlace is where a group stands in the two-level fair queue, read in
// one round trip ([Queue.FairPlace]).
type FairPlace struct {
	// At is the time of the reading: Redis TIME, or [Config.Clock] when set.
	At time.Time
	// Tenants counts the tenants waiting at each level.
	Tenants map[contracts.Priority]int64
	// TenantRank is the 0-based rank of the group's tenant among the
	// tenants waiting at the group's level; -1 when it is not waiting.
	TenantRank int64
	// GroupRank is the 0-based rank of the group among its tenant's groups
	// waiting at its level; -1 when it is not waiting.
	GroupRank int64
}

// FairPlace reads where g stands in the fair queue at level: the time (the
// Redis time, or [Config.Clock]'s), the waiting tenants of every level, and the tenant's and the
// group's ranks at level. It changes nothing. With shards it reads g's
// shard, whose fair queue admits g: the waiting tenants counted are that
// shard's, and the ranks are among them.
func (q *Queue) FairPlace(ctx context.Context, g contracts.GroupRef, level contracts.Priority) (*FairPlace, error) {
	if q.sharded() {
		return q.For(g.Tenant).FairPlace(ctx, g, level)
	}
	pipe := q.rdb.Pipeline()
	now := pipe.Time(ctx)
	tenants := make(map[contracts.Priority]*redis.IntCmd, len(contracts.Priorities))
	for _, p := range contracts.Priorities {
		tenants[p] = pipe.ZCard(ctx, q.keys.FairQueue(p))
	}
	tenantRank := pipe.ZRank(ctx, q.keys.FairQueue(level), g.Tenant)
	groupRank := pipe.ZRank(ctx, q.keys.TenantGroups(g.Tenant, level), q.keys.GroupMember(g))
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: fair place of %s: %w", g, err)
	}
	out := &FairPlace{At: now.Val(), Tenants: make(map[contracts.Priority]int64, len(tenants)), TenantRank: -1, GroupRank: -1}
	if q.cfg.Clock != nil {
		out.At = q.cfg.Clock() // the clock the scripts were given, as Now reads it
	}
	for p, c := range tenants {
		out.Tenants[p] = c.Val()
	}
	tr, terr := tenantRank.Result()
	gr, gerr := groupRank.Result()
	if terr == nil && gerr == nil {
		out.TenantRank, out.GroupRank = tr, gr
	}
	return out, nil
}

// GroupExists reports whether Redis holds g's meta (it was submitted to,
// or created by a control, and has not expired).
func (q *Queue) GroupExists(ctx context.Context, g contracts.GroupRef) (bool, error) {
	if q.sharded() {
		return q.For(g.Tenant).GroupExists(ctx, g)
	}
	n, err := q.rdb.Exists(ctx, q.keys.GroupMeta(g)).Result()
	if err != nil {
		return false, fmt.Errorf("redisq: group %s exists: %w", g, err)
	}
	return n > 0, nil
}

// WindowCounts are the admissions of one rate window and what shared it
// ([Queue.WindowCounts]).
type WindowCounts struct {
	// Window is the window number (ms since the epoch / window length).
	Window int64
	// Global counts the jobs admitted in the window.
	Global int64
	// Active counts the tenants sharing the global limit now.
	Active int64
	// Tenants counts the jobs admitted in the window per active tenant
	// (tenants with none are left out).
	Tenants map[string]int64
	// BackingOff counts the jobs in the non-ready queue now.
	BackingOff int64
}

// WindowCounts reads the admissions of window (the global count and each
// active tenant's) with the active tenants and the non-ready queue's size,
// in two round trips. It changes nothing. With shards it reads every
// shard (concurrently) and sums: Global and BackingOff over the shards,
// Active over their active tenants (a tenant is active in its own shard
// only), and Tenants gathers each shard's tenants.
func (q *Queue) WindowCounts(ctx context.Context, window int64) (*WindowCounts, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) (*WindowCounts, error) { return s.WindowCounts(ctx, window) })
		if err != nil {
			return nil, err
		}
		out := &WindowCounts{Window: window, Tenants: map[string]int64{}}
		for _, p := range parts {
			out.Global += p.Global
			out.Active += p.Active
			out.BackingOff += p.BackingOff
			for t, n := range p.Tenants {
				out.Tenants[t] += n
			}
		}
		return out, nil
	}
	pipe := q.rdb.Pipeline()
	gc := pipe.Get(ctx, q.keys.RateLimitGlobal(window))
	act := pipe.SMembers(ctx, q.keys.ActiveTenants())
	nr := pipe.ZCard(ctx, q.keys.NonReadyQueue())
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: window counts: %w", err)
	}
	out := &WindowCounts{Window: window, Active: int64(len(act.Val())), BackingOff: nr.Val(), Tenants: map[string]int64{}}
	out.Global, _ = gc.Int64()
	if tenants := act.Val(); len(tenants) > 0 {
		pipe := q.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(tenants))
		for i, t := range tenants {
			cmds[i] = pipe.Get(ctx, q.keys.RateLimitTenant(t, window))
		}
		if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
			return nil, fmt.Errorf("redisq: window counts: %w", err)
		}
		for i, t := range tenants {
			if n, _ := cmds[i].Int64(); n > 0 {
				out.Tenants[t] = n
			}
		}
	}
	return out, nil
}

// GlobalAdmitted counts the jobs admitted in window (0 in the ungated
// admission mode, which keeps no counter); with shards, by all shards.
func (q *Queue) GlobalAdmitted(ctx context.Context, window int64) (int64, error) {
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int64, error) { return s.GlobalAdmitted(ctx, window) })
	}
	n, err := q.rdb.Get(ctx, q.keys.RateLimitGlobal(window)).Int64()
	if err != nil && !isNil(err) {
		return 0, fmt.Errorf("redisq: admitted in window %d: %w", window, err)
	}
	return n, nil
}

// QueueSizes are the sizes of the system-wide queues ([Queue.Sizes]).
type QueueSizes struct {
	// BackingOff counts the jobs in the non-ready (backoff) queue.
	BackingOff int64
	// Inflight counts the admitted jobs not yet confirmed on READY.
	Inflight int64
	// At is the time of the reading: Redis TIME, or [Config.Clock] when set.
	At time.Time
}

// Sizes reads the non-ready and in-flight queues' sizes in one round trip.
// With shards it reads every shard (concurrently) and sums the sizes; At
// is then the latest of the shards' readings.
func (q *Queue) Sizes(ctx context.Context) (*QueueSizes, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) (*QueueSizes, error) { return s.Sizes(ctx) })
		if err != nil {
			return nil, err
		}
		out := &QueueSizes{}
		for _, p := range parts {
			out.BackingOff += p.BackingOff
			out.Inflight += p.Inflight
			if p.At.After(out.At) {
				out.At = p.At
			}
		}
		return out, nil
	}
	pipe := q.rdb.Pipeline()
	nr := pipe.ZCard(ctx, q.keys.NonReadyQueue())
	inf := pipe.ZCount(ctx, q.keys.Inflight(), "-inf", "(+inf") // not its pin
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: queue sizes: %w", err)
	}
	return &QueueSizes{BackingOff: nr.Val(), Inflight: inf.Val(), At: now.Val()}, nil
}
