package fetcher

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// shardOwner is what a fetcher holds of the logical shards
// (docs/ARCHITECTURE.md §11.1): the shards it admits from, under leases
// spread evenly over the live fetchers, and each shard's grant of the
// global limits for the current period. Admission takes from the shards
// it holds alone, each at its grant and with its lease's epoch, so a
// fetcher that lost a shard admits nothing from it (the shard's fence
// refuses it) and the shards together never pass the global limits.
type shardOwner struct {
	q      *redisq.Queue
	leases *redisq.ShardLeases
	grants *redisq.Grants
	holder string
	types  []string // the limited types, for the demand reports
	log    *slog.Logger

	// round is held by an admission round from its turns to its count
	// (turns, admitted): a report reads what a shard admitted of its last
	// grant only between rounds, never while a round's jobs are uncounted
	round sync.Mutex

	mu      sync.Mutex
	held    map[int]uint64 // shard -> epoch, fenced
	heldAt  time.Time      // the last Hold that answered
	budgets map[int]*shardBudget
	// lastRound is when the last admission round returned, and cut
	// whether it admitted all it asked for (more may be due at once)
	lastRound time.Time
	cut       bool
	// interval is the rounds' usual spacing: a moving average of the time
	// between rounds that found jobs due (shardCatchUp)
	interval time.Duration
	// since is when each shard was taken at its epoch, and seen when it
	// last admitted or held a job of each limited type or destination:
	// its demand for the name (typeDemandFor)
	since map[int]time.Time
	seen  map[int]map[string]time.Time
}

// typeDemandFor is how long a shard counts as having jobs of a limited
// type or destination waiting after it last admitted or held one (its
// demand for the name's grant). Waiting jobs are not indexed by type, so a
// shard held for less than this reports demand for every name; a name
// that appears in a shard after it is held back for want of a grant, and
// is granted from the next period on.
const typeDemandFor = time.Second

// shardBudget is a shard's grant for one period and what was admitted of
// it.
type shardBudget struct {
	period   int64
	endMs    int64 // the period's end, Redis time
	ends     time.Time
	jobs     int64
	types    map[string]int64
	admitted int64
	// skipped counts jobs of the grant that came due while no round ran
	// for longer than the catch-up (shardCatchUp): they are not caught up
	// (so a stall is not followed by a burst) and flow back unused
	skipped  int64
	typesUse map[string]int64
	// typesSkipped is skipped for each type's grant
	typesSkipped map[string]int64
	// share is the shard's part of the demand the period was allocated
	// by (redisq.Grant.Share)
	share float64
}

// shardRoundGap is the shortest time between two admission rounds of a
// fetcher that holds shards, unless a round was cut short by its batch
// size or READY's room. Each round hands on what came due of each shard's
// grant since the round before, so a sliding window of the global limit
// holds at most about this long of the limit beyond it; a shorter gap
// runs more scripts for fewer jobs each.
const shardRoundGap = 10 * time.Millisecond

// shardCatchUp is the most of a grant's period a round catches up, given
// the rounds' usual spacing: twice that spacing, at least twice
// shardRoundGap and at most the period. What came due before that (a
// stall: the machine, a slow Redis) is skipped, so that what a sliding
// second of the limit holds beyond it is bounded by the rounds' spacing,
// not by the longest stall; and a loaded machine, whose rounds come
// further apart, still catches up what came due since its last round.
func shardCatchUp(interval, period time.Duration) time.Duration {
	return min(max(2*interval, 2*shardRoundGap), period)
}

// due takes the jobs of the grant due at now and not yet admitted: the
// grant is spread evenly over its period, a job due as soon as its part of
// the period has begun, and what an earlier round left is due at once up
// to catchUp's worth (the rest is skipped). (Spreading it over less than
// the period, so that the last round of a period takes the rest, bunches
// the jobs around the periods' starts: the cluster bench measured 1.042
// times the limit in a sliding window against 1.011.)
func (b *shardBudget) due(now time.Time, period, catchUp time.Duration) int64 {
	return b.spread(b.jobs, b.admitted, &b.skipped, now, period, catchUp)
}

// typeDue is due for the grant of limited name ty (a type or a
// destination), spread over the period the same way.
func (b *shardBudget) typeDue(ty string, now time.Time, period, catchUp time.Duration) int64 {
	sk := b.typesSkipped[ty]
	n := b.spread(b.types[ty], b.typesUse[ty], &sk, now, period, catchUp)
	b.typesSkipped[ty] = sk
	return max(n, 0)
}

// spread is what is due at now of a grant of total jobs over the period,
// admitted of it so far and skipped (raised by what a stall skips).
func (b *shardBudget) spread(total, admitted int64, skipped *int64, now time.Time, period, catchUp time.Duration) int64 {
	f := min(max(float64(now.Sub(b.ends.Add(-period)))/float64(period), 0), 1)
	n := int64(math.Ceil(float64(total)*f-1e-9)) - admitted - *skipped
	if most := int64(math.Ceil(float64(total) * float64(catchUp) / float64(period))); n > most {
		*skipped += n - most
		n = most
	}
	return n
}

// dueAt is when the grant's next job comes due (the period's end when
// none is left).
func (b *shardBudget) dueAt(period time.Duration) time.Time {
	done := b.admitted + b.skipped
	if done >= b.jobs || b.jobs <= 0 {
		return b.ends
	}
	return b.ends.Add(-period).Add(time.Duration(float64(period)*float64(done)/float64(b.jobs)) + time.Microsecond)
}

// holdEvery is how often a fetcher renews and takes its shards: a third
// of the lease time, at most a second, so that a fetcher that joins gets
// its share within about a second of the others' next calls.
func holdEvery(ttl time.Duration) time.Duration { return min(ttl/3, time.Second) }

// grantPeriod is the grant period for a rate-limit window: 100 ms when
// the window is a whole number of them, else the window itself.
func grantPeriod(window time.Duration) time.Duration {
	if window%redisq.DefaultGrantPeriod == 0 {
		return redisq.DefaultGrantPeriod
	}
	return window
}

// newShardOwner returns the shard owner of a fetcher whose holder id is
// holder, or nil when q has one shard (every fetcher admits from it).
func newShardOwner(ctx context.Context, q *redisq.Queue, holder string, log *slog.Logger) (*shardOwner, error) {
	if q.ShardCount() <= 1 {
		return nil, nil
	}
	leases, err := q.NewShardLeases(ctx, 0)
	if err != nil {
		return nil, err
	}
	grants, err := q.NewGrants(ctx, grantPeriod(q.Config().Window))
	if err != nil {
		return nil, err
	}
	o := &shardOwner{q: q, leases: leases, grants: grants, holder: holder, log: log,
		held: map[int]uint64{}, budgets: map[int]*shardBudget{}, since: map[int]time.Time{}, seen: map[int]map[string]time.Time{}}
	for t := range q.Config().TypeLimits {
		o.types = append(o.types, t)
	}
	slices.Sort(o.types)
	return o, nil
}

// run holds the shards and reports for their grants until ctx is
// cancelled, then gives the shards back. wake is called when the shards
// held change.
func (o *shardOwner) run(ctx context.Context, wake func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		o.hold(ctx, wake)
		loop.Every(ctx, holdEvery(o.leases.TTL()), func(ctx context.Context) { o.hold(ctx, wake) })
	})
	wg.Go(func() {
		// each report right after a period starts, so that its grant
		// lasts the whole period
		for ctx.Err() == nil {
			fresh, left := o.report(ctx)
			if fresh {
				wake()
			}
			if !loop.Sleep(ctx, left+time.Millisecond) {
				return
			}
		}
	})
	wg.Wait()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := o.leases.Release(rctx, o.holder); err != nil {
		o.log.Warn("shards not given back: the other fetchers take them when the leases run out", "err", err)
	}
}

// hold renews and takes this fetcher's share of the shards. A shard is
// used only while the last Hold that answered is less than the lease time
// old.
func (o *shardOwner) hold(ctx context.Context, wake func()) {
	held, err := o.leases.Hold(ctx, o.holder)
	if err != nil && ctx.Err() == nil {
		o.log.Warn("shard leases", "err", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if held == nil {
		if time.Since(o.heldAt) > o.leases.TTL() && len(o.held) > 0 {
			o.held = map[int]uint64{}
			o.log.Warn("shard leases not renewed for the lease time: admitting from no shard until they are")
		}
		return
	}
	o.heldAt = time.Now()
	changed := len(held) != len(o.held)
	for s, e := range held {
		if o.held[s] != e {
			changed = true
			delete(o.budgets, s) // a new epoch starts with a new grant
			o.since[s], o.seen[s] = o.heldAt, map[string]time.Time{}
		}
	}
	for s := range o.since {
		if _, ok := held[s]; !ok {
			delete(o.budgets, s)
			delete(o.since, s)
			delete(o.seen, s)
		}
	}
	o.held = held
	if changed {
		o.log.Info("shards held", "shards", slices.Sorted(maps.Keys(held)))
		go wake()
	}
}

// report sends each held shard's demand and use to the grants and keeps
// the grant of the current period. It reports whether a shard got a new
// period's grant with jobs in it, and how long the period has left (a
// whole period when no grant answered).
func (o *shardOwner) report(ctx context.Context) (fresh bool, left time.Duration) {
	o.mu.Lock()
	shards := slices.Sorted(maps.Keys(o.held))
	o.mu.Unlock()
	left = o.grants.Config().Period
	// the shards at once, so that every grant comes early in its period
	var wg sync.WaitGroup
	for _, s := range shards {
		wg.Go(func() {
			g, ok := o.reportShard(ctx, s)
			if !ok {
				return
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			left = min(left, g.Remaining)
			if _, held := o.held[s]; !held {
				return
			}
			if b := o.budgets[s]; b == nil || b.period != g.Period {
				o.budgets[s] = &shardBudget{period: g.Period, endMs: g.EndMs, ends: time.Now().Add(g.Remaining), jobs: g.Jobs, types: g.Types,
					typesUse: map[string]int64{}, typesSkipped: map[string]int64{}, share: g.Share}
				fresh = fresh || g.Jobs > 0
			}
		})
	}
	wg.Wait()
	return fresh, max(left, 0)
}

// reportShard reports shard s's demand and what it admitted of its last
// grant, and returns its grant; ok is false when either call failed.
func (o *shardOwner) reportShard(ctx context.Context, s int) (g redisq.Grant, ok bool) {
	// the learned rates of destinations are granted as the static type
	// limits are (the last reading when Redis cannot be read)
	learned, _ := o.q.LearnedRates(ctx)
	limits := o.q.GrantedLimits(learned)
	names := o.types
	if len(limits) > 0 {
		names = slices.Clone(o.types)
		for t := range limits {
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
	}
	d, err := o.q.ShardDemand(ctx, s, names)
	d.Limits = limits
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("shard demand", "shard", s, "err", err)
		}
		return g, false
	}
	o.round.Lock()
	o.mu.Lock()
	now := time.Now()
	maps.DeleteFunc(o.seen[s], func(_ string, at time.Time) bool { return now.Sub(at) >= typeDemandFor })
	if now.Sub(o.since[s]) >= typeDemandFor {
		// the names the shard admitted or held lately alone
		for t := range d.Types {
			if _, ok := o.seen[s][t]; !ok {
				delete(d.Types, t)
			}
		}
	}
	used := redisq.UsedAll // a shard just taken: what was admitted is unknown
	if b := o.budgets[s]; b != nil {
		used = redisq.Used{Jobs: b.admitted, Types: maps.Clone(b.typesUse)}
	}
	o.mu.Unlock()
	o.round.Unlock()
	if g, err = o.grants.Report(ctx, s, d, used); err != nil {
		if ctx.Err() == nil {
			o.log.Warn("shard grant", "shard", s, "err", err)
		}
		return g, false
	}
	return g, true
}

// turns are the shards to admit from now, each with what is due of its
// grant (shardBudget.due) and of its grant of each limited type or
// destination (TypeMax): a grant spreads itself over its period, so that
// the shards together admit each limit evenly, not in the bursts of their
// rounds. The turn's rates are the whole limits, so the shard's pacers
// never hold back what is due. wait, when there are none, is how long
// until some shard has a job due (0: no shard is held); rounds are at
// least shardRoundGap apart unless the last one was cut short. share is
// the held shards' part of the demand their periods were allocated by (at
// most 1), the part of READY's rooms the round takes.
func (o *shardOwner) turns() (turns []redisq.ShardTurn, wait time.Duration, share float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if len(o.held) == 0 {
		return nil, 0, 0
	}
	gapEnd := o.lastRound.Add(shardRoundGap)
	if !o.cut && now.Before(gapEnd) {
		return nil, gapEnd.Sub(now), 0
	}
	period := o.grants.Config().Period
	global := o.q.Config().GlobalLimit
	catchUp := shardCatchUp(o.interval, period)
	// the next grant comes right after the current period ends (and wakes
	// admission when it has jobs)
	next := now.Add(period)
	for _, b := range o.budgets {
		if e := b.ends.Add(2 * time.Millisecond); e.After(now) && e.Before(next) {
			next = e
		}
	}
	for s, epoch := range o.held {
		b := o.budgets[s]
		if b == nil || !now.Before(b.ends) || b.admitted+b.skipped >= b.jobs {
			continue
		}
		due := b.due(now, period, catchUp)
		if due <= 0 {
			if at := b.dueAt(period); at.Before(next) {
				next = at
			}
			continue
		}
		t := redisq.ShardTurn{Shard: s, Epoch: epoch, Limit: global, Max: int(due), UntilMs: b.endMs}
		if len(b.types) > 0 {
			t.TypeMax = make(map[string]int, len(b.types))
			for ty := range b.types {
				t.TypeMax[ty] = int(b.typeDue(ty, now, period, catchUp))
			}
		}
		turns = append(turns, t)
		share += b.share
	}
	if len(turns) == 0 {
		wait = max(next.Sub(now), gapEnd.Sub(now), time.Millisecond)
	}
	return turns, wait, min(share, 1)
}

// admitted counts the jobs an admission that asked for asked jobs took
// against their shards' grants, and drops the shards another fetcher has
// taken over.
func (o *shardOwner) admitted(res *redisq.AdmitResult, asked int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if !o.lastRound.IsZero() && len(res.Jobs) > 0 {
		// the spacing of rounds that admit, a stall weighing no more than
		// the catch-up's most
		d := min(now.Sub(o.lastRound), o.grants.Config().Period)
		o.interval += (d - o.interval) / 8
	}
	o.lastRound, o.cut = now, len(res.Jobs)+res.Parked >= asked
	n := o.q.ShardCount()
	for s, names := range res.ShardHeld {
		o.see(s, now, slices.Collect(maps.Keys(names))...)
	}
	for _, j := range res.Jobs {
		s := redisq.ShardOf(j.Group.Tenant, n)
		if b := o.budgets[s]; b != nil {
			b.admitted++
			// its type's grant, and its explicit destination's
			for i, t := range []string{j.Type, j.Destination} {
				if _, limited := b.types[t]; limited && (i == 0 || t != j.Type) {
					b.typesUse[t]++
					o.see(s, now, t)
				}
			}
		}
	}
	for _, s := range res.Stale {
		delete(o.held, s)
		delete(o.budgets, s)
		delete(o.since, s)
		delete(o.seen, s)
		o.log.Warn("shard taken over by another fetcher", "shard", s)
	}
}

// see notes that shard s had jobs of the names at now (o.mu held).
func (o *shardOwner) see(s int, now time.Time, names ...string) {
	seen := o.seen[s]
	if seen == nil {
		return
	}
	for _, t := range names {
		if t != "" {
			seen[t] = now
		}
	}
}
