package redisq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// Defaults of [GrantsConfig].
const (
	// DefaultGrantPeriod is how often a shard owner reports and gets a grant.
	DefaultGrantPeriod = 100 * time.Millisecond
	// GrantBurstDivisor: the default [GrantsConfig.Burst] is
	// Window/GrantBurstDivisor: grants run at most 1.001 × the limit per
	// window's worth of periods, which leaves the room of 1.02 × the limit
	// in any sliding window to the timing of the shards' rounds. (With
	// 1.01 the cluster bench measured 1.020 in its busiest sliding second,
	// with 1.001 1.014, at the same utilisation.)
	GrantBurstDivisor = 1000
)

var grantScript = loadScript("grant")

func init() { allScripts["grant"] = grantScript }

// ErrBadReport is returned by [Grants.Report] for a report it cannot take
// (a negative shard, demand or count).
var ErrBadReport = errors.New("redisq: bad grant report")

// GrantsConfig configures [Grants]: the limits split between the shards of
// a Redis Cluster installation (docs/ARCHITECTURE.md §11.1). Zero values
// mean the defaults stated per field.
type GrantsConfig struct {
	// Limit is the number of jobs all shards together may admit per
	// Window (the global limit, §5's GLOBAL_RPS); required, at least 1.
	Limit int
	// TypeLimits caps, per job type, the jobs all shards together may
	// admit of it per Window (§5's TYPE_RATE_LIMITS); a type not listed has
	// no limit of its own. Each at least 1.
	TypeLimits map[string]int
	// Window is the rate-limit window; default [DefaultWindow] (1 s). It
	// must be a whole number of Periods.
	Window time.Duration
	// Period is how often shard owners report and how long a grant lasts:
	// each grant is for one aligned period (the period number and its end
	// are in the [Grant]); default [DefaultGrantPeriod] (100 ms).
	Period time.Duration
	// Burst bounds how far grants may run ahead of the even pace: the jobs
	// granted minus returned in any Window's worth of consecutive periods
	// are at most Limit × (1 + Burst/Window), so that jobs admitted evenly
	// over their periods make no sliding window of Window hold more than
	// that plus the rounding of each shard's even spread (a job per shard
	// at each end); default Window/[GrantBurstDivisor] (1.001). Within that
	// bound, what a window's earlier periods left (not granted, or granted
	// and returned) is spread over its later periods.
	Burst time.Duration
	// Observer, when set, receives every script's duration.
	Observer Observer
	// Clock, when set, replaces Redis TIME inside the script (tests only).
	Clock func() time.Time
}

func (c *GrantsConfig) setDefaults() {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Period == 0 {
		c.Period = DefaultGrantPeriod
	}
	if c.Burst == 0 {
		c.Burst = c.Window / GrantBurstDivisor
	}
}

func (c *GrantsConfig) validate() error {
	switch {
	case c.Limit < 1:
		return fmt.Errorf("redisq: grants limit %d: must be at least 1", c.Limit)
	case c.Period < time.Millisecond || c.Period%time.Millisecond != 0:
		return fmt.Errorf("redisq: grant period %s: must be a whole number of ms, at least 1ms", c.Period)
	case c.Window < c.Period || c.Window%c.Period != 0:
		return fmt.Errorf("redisq: grants window %s: must be a whole number of periods (%s)", c.Window, c.Period)
	case c.Burst < 0 || c.Burst > c.Window:
		return fmt.Errorf("redisq: grants burst %s: must be between 0 and the window (%s)", c.Burst, c.Window)
	}
	for t, n := range c.TypeLimits {
		if err := contracts.ValidateType(t); err != nil {
			return fmt.Errorf("redisq: grants type limit %q: %w", t, err)
		}
		if n < 1 {
			return fmt.Errorf("redisq: grants type limit %s=%d: must be at least 1", t, n)
		}
	}
	return nil
}

// slidingCap is the most jobs granted minus returned in any window's worth
// of consecutive periods for a limit per window: limit × (1 +
// Burst/Window), rounded down.
func (c *GrantsConfig) slidingCap(limit int) int64 {
	w, b := c.Window.Microseconds(), c.Burst.Microseconds()
	return int64(float64(limit) * float64(w+b) / float64(w))
}

// Grants splits the global rate limit and the per-type limits between the
// owners of the logical shards of a Redis Cluster installation
// (docs/ARCHITECTURE.md §11.1). Each owner reports its demand every period
// ([Grants.Report]) and admits at most its grant in that period; one
// script in the cross-shard keys turns the reports into grants:
//
//   - Levels are served strictly, as the fair queue serves them (§4): the
//     whole of a period goes to the shards with demand at the highest
//     level any shard has demand at, in proportion to that demand (the
//     weights of their tenants waiting there). A shard spends its grant
//     through its own fair queue, so what its jobs at that level leave goes
//     to its lower levels.
//   - Each limited type's period is split among the shards with an
//     overall grant, in proportion to their demand for the type; a shard's
//     grant of a type never exceeds its overall grant.
//   - A shard that reports no demand gets nothing, and its share goes to
//     the others: from the next period on, and in the period itself to
//     the shards that have not reported in it yet (in proportion to their
//     allotments; those that took theirs already are not paid back). A
//     shard that reports nothing for a whole period (its owner dead) is
//     left out of the next period's split (at most two periods after its
//     last report); what it was allotted and did not take is not granted,
//     and goes back to the window's pool.
//   - In every aligned window the jobs granted minus those returned
//     unused ([Used]) never exceed the limit. A period grants an even
//     share of what is left of its window over the periods left, at most
//     what keeps any window's worth of consecutive periods within the
//     limit plus the burst tolerance ([GrantsConfig.Burst]).
//   - Integer grants carry each shard's fraction to the next period, so
//     shares are exact over time.
//
// Demand reported in a period counts from the next period's split: a shard
// whose demand appears gets its share one period later, and the share of
// one whose demand disappears goes, in that period, to the shards that
// report after it (when none does, it returns to the window's pool).
//
// The keys are under the prefix given to [NewGrants] (a hash tag of their
// own, "<prefix>{g}:", in a cluster). A Grants is safe for concurrent use.
type Grants struct {
	rdb    redis.UniversalClient
	keys   Keys
	cfg    GrantsConfig
	limits string
}

// NewGrants returns the grants in the keys under prefix (all of them in
// one slot when it carries a hash tag) on rdb. It checks cfg and loads the
// script.
func NewGrants(ctx context.Context, rdb redis.UniversalClient, prefix string, cfg GrantsConfig) (*Grants, error) {
	if prefix == "" {
		return nil, errors.New("redisq: grants: empty key prefix")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Grants{rdb: rdb, keys: NewKeys(prefix), cfg: cfg}
	g.limits = g.limitsArg(cfg.TypeLimits)
	if err := grantScript.Load(ctx, rdb).Err(); err != nil {
		return nil, fmt.Errorf("redisq: load grant script: %w", err)
	}
	return g, nil
}

// limitsArg is the script's argument of limited names: 'name=limit:sliding
// cap,...' in name order.
func (g *Grants) limitsArg(limits map[string]int) string {
	var b strings.Builder
	for i, t := range slices.Sorted(maps.Keys(limits)) {
		if i > 0 {
			b.WriteByte(',')
		}
		n := limits[t]
		fmt.Fprintf(&b, "%s=%d:%d", t, n, g.cfg.slidingCap(n))
	}
	return b.String()
}

// Config returns the configuration with defaults filled in.
func (g *Grants) Config() GrantsConfig { return g.cfg }

// Demand is what a shard has waiting: per level, the sum of the weights of
// its tenants with waiting jobs there, and per limited type, the sum of the
// weights of its tenants with waiting jobs of the type (types without a
// limit are ignored). The zero Demand is none.
type Demand struct {
	High, Normal, Low int64
	Types             map[string]int64
	// Limits are limits per Window beyond [GrantsConfig.TypeLimits] for
	// this report (a destination's learned rate, [Queue.GrantedLimits]: 0
	// while it is stopped), granted as a type's; one with the name of a
	// static limit replaces it where lower. A name's window count is kept
	// while reports without it come, so owners whose readings of the
	// rates differ for a moment do not count its window twice.
	Limits map[string]int
}

// Used is how much of its last grant a shard admitted: Jobs in all, and
// per limited type. The rest flows back to the window's pool at once (while
// that grant's window lasts). A type granted and absent from Types counts
// as wholly admitted. The zero Used says that nothing was admitted; an
// owner that cannot tell (one that has just taken the shard over from
// another) reports [UsedAll].
type Used struct {
	Jobs  int64
	Types map[string]int64
}

// UsedAll reports a shard's last grant wholly admitted: nothing flows back.
var UsedAll = Used{Jobs: math.MaxInt64}

// Grant is what a shard may admit in one aligned period.
type Grant struct {
	// Jobs is the most jobs it may admit in the period, all types together.
	Jobs int64
	// Types holds, for every limited type, the most jobs of it it may admit
	// in the period (0: none); each is at most Jobs. A type not limited has
	// no entry.
	Types map[string]int64
	// Period numbers the aligned period the grant is for (Redis time in ms
	// divided by the period).
	Period int64
	// EndMs is when the period ends, Redis time in ms: pass it as
	// [ShardTurn.UntilMs], so that no admission spends the grant later.
	EndMs int64
	// Remaining is the time left until the period ends, by the clock the
	// script used: the owner admits the grant evenly within it and reports
	// again when it ends.
	Remaining time.Duration
	// Share is the shard's part of the demand the period was allocated by
	// (0 to 1; 0 when its demand came too late for the allocation): what
	// an owner takes of a resource the grants do not split, such as READY's
	// room per type.
	Share float64
}

// Report is one shard owner's report for the current period: its demand
// now and how much of its last grant it admitted. It returns the shard's
// grant for the current period; a second report in the same period returns
// the same grant again (and its Used is not counted), so a call may be
// repeated. A shard's first report gets nothing: demand counts from the
// next period's split.
func (g *Grants) Report(ctx context.Context, shard int, d Demand, u Used) (Grant, error) {
	if shard < 0 || d.High < 0 || d.Normal < 0 || d.Low < 0 || u.Jobs < 0 {
		return Grant{}, fmt.Errorf("%w: shard %d, demand %+v, used %+v", ErrBadReport, shard, d, u)
	}
	now := ""
	if g.cfg.Clock != nil {
		now = strconv.FormatInt(g.cfg.Clock().UnixMilli(), 10)
	}
	for _, m := range []map[string]int64{d.Types, u.Types} {
		for t, n := range m {
			if n < 0 {
				return Grant{}, fmt.Errorf("%w: shard %d, type %s: %d", ErrBadReport, shard, t, n)
			}
		}
	}
	limits := g.limits
	if len(d.Limits) > 0 {
		all := maps.Clone(g.cfg.TypeLimits)
		if all == nil {
			all = make(map[string]int, len(d.Limits))
		}
		for t, n := range d.Limits {
			if err := contracts.ValidateDestination(t); err != nil || n < 0 {
				return Grant{}, fmt.Errorf("%w: shard %d, limit %s=%d", ErrBadReport, shard, t, n)
			}
			if s, ok := all[t]; !ok || n < s {
				all[t] = n
			}
		}
		limits = g.limitsArg(all)
	}
	args := []any{now, ms(g.cfg.Period), ms(g.cfg.Window), g.cfg.Limit, g.cfg.slidingCap(g.cfg.Limit), limits,
		shard, d.High, d.Normal, d.Low, u.Jobs}
	args = appendCounts(args, d.Types)
	args = appendCounts(args, u.Types)
	v, err := runScript(ctx, g.rdb, g.cfg.Observer, "grant", grantScript,
		[]string{g.keys.GrantPool(), g.keys.GrantShards()}, args...)
	if err != nil {
		return Grant{}, err
	}
	l := toList(v)
	if len(l) < 5 {
		return Grant{}, fmt.Errorf("redisq: grant script: reply %v", v)
	}
	out := Grant{Jobs: toInt(l[0]), Period: toInt(l[1]), EndMs: toInt(l[2]), Remaining: time.Duration(toInt(l[2])-toInt(l[3])) * time.Millisecond,
		Share: float64(toInt(l[4])) / 1e6}
	if len(l) > 5 {
		out.Types = make(map[string]int64, (len(l)-5)/2)
		for i := 5; i+1 < len(l); i += 2 {
			out.Types[toStr(l[i])] = toInt(l[i+1])
		}
	}
	return out, nil
}

// appendCounts appends len(m) and then each type and its count, in type
// order.
func appendCounts(args []any, m map[string]int64) []any {
	types := make([]string, 0, len(m))
	for t := range m {
		types = append(types, t)
	}
	sort.Strings(types)
	args = append(args, len(types))
	for _, t := range types {
		args = append(args, t, m[t])
	}
	return args
}
