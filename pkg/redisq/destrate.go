package redisq

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of [AdaptiveConfig]; bulkaction's settings use the same values.
const (
	// DefaultAdaptiveIncrease is the additive increase: jobs/s added to a
	// destination's rate per second while it accepts.
	DefaultAdaptiveIncrease = 5.0
	// DefaultAdaptiveIncreaseRatio is bulkaction's setting
	// ADAPTIVE_RATE_INCREASE_RATIO: the share of the distance from the rate
	// at the last decrease added per second (the zero IncreaseRatio of
	// [AdaptiveConfig] means none: additive only).
	DefaultAdaptiveIncreaseRatio = 0.5
	// DefaultAdaptiveDecrease is the multiplicative decrease on a throttle.
	DefaultAdaptiveDecrease = 0.8
	// DefaultAdaptiveFloor is the least learned rate, jobs/s.
	DefaultAdaptiveFloor = 1.0
	// DefaultAdaptiveDecreaseHold is the least time between two decreases.
	DefaultAdaptiveDecreaseHold = time.Second
	// DefaultAdaptiveMaxDestinations bounds the destinations tracked.
	DefaultAdaptiveMaxDestinations = 1000
	// DefaultAdaptiveForgetAfter is how long a destination not reported is kept.
	DefaultAdaptiveForgetAfter = 10 * time.Minute
	// DefaultAdaptiveMaxDestinationsPerTenant bounds a tenant's explicit
	// destinations.
	DefaultAdaptiveMaxDestinationsPerTenant = 100
)

// AdaptiveConfig configures the adaptive rate per destination
// (docs/ARCHITECTURE.md §5): an AIMD controller per destination whose
// state is in Redis, shared by every fetcher and worker. Zero values mean
// the defaults stated per field.
type AdaptiveConfig struct {
	// Enabled turns the adaptive rate on: workers report outcomes per
	// destination, and admission and releases honour the learned rates
	// ([Queue.LearnedRates]). false, the default, leaves both as they were.
	Enabled bool
	// TimeoutThrottles counts a job that timed out as a throttle of its
	// destination; false, the default, as accepted.
	TimeoutThrottles bool
	// Increase is added to a destination's rate, in jobs/s, per second of
	// reports in which it accepted jobs and was used at half its rate or
	// more; default [DefaultAdaptiveIncrease] (5).
	Increase float64
	// IncreaseRatio makes the increase proportional to the distance from
	// the rate at the last decrease: each second the rate grows by
	// IncreaseRatio × |that rate − rate|, at least Increase, so it comes
	// back quickly after a decrease, slows down near the rate that was too
	// much, and speeds up past it when the destination accepts more. Half a
	// decrease's worth past that rate (1 + (1 − Decrease)/2 times it) with
	// no throttle, the capacity has risen: the rate grows by itself per
	// second (a probe, doubling or more) until a throttle, which halves it,
	// not below the rate of the last decrease. 0, the
	// zero value, means none: additive only (Increase); bulkaction's
	// setting defaults to [DefaultAdaptiveIncreaseRatio]. Negative is
	// invalid.
	IncreaseRatio float64
	// Decrease multiplies the rate on a throttle (0 < Decrease < 1);
	// default [DefaultAdaptiveDecrease] (0.8). A throttle once the rate is
	// back at the rate of its last decrease (the capacity where it was)
	// takes half the decrease: 1 − (1 − Decrease)/2, 0.9 for 0.8.
	Decrease float64
	// Floor is the least rate, jobs/s; default [DefaultAdaptiveFloor] (1).
	Floor float64
	// Ceiling is the most rate, jobs/s; 0, the default, means none.
	Ceiling float64
	// DecreaseHold is the least time between two decreases, so that the
	// throttles of one overshoot, already in flight, count once; default
	// [DefaultAdaptiveDecreaseHold] (1 s).
	DecreaseHold time.Duration
	// MaxDestinations bounds the destinations tracked at once; a new one
	// past it is refused (not learned); default
	// [DefaultAdaptiveMaxDestinations] (1000).
	MaxDestinations int
	// ForgetAfter forgets a destination not reported for this long; default
	// [DefaultAdaptiveForgetAfter] (10 min). A tenant's explicit
	// destination not used for this long leaves its set too.
	ForgetAfter time.Duration
	// MaxDestinationsPerTenant bounds the explicit destinations
	// ([Job.Destination]) a tenant uses at once; a job naming a new one past
	// it falls back to its type ([EnqueuedGroup.DestinationsRefused]);
	// default [DefaultAdaptiveMaxDestinationsPerTenant] (100). It holds
	// whether or not the adaptive rate is on.
	MaxDestinationsPerTenant int
}

func (c *AdaptiveConfig) setDefaults() {
	if c.Increase == 0 {
		c.Increase = DefaultAdaptiveIncrease
	}
	if c.Decrease == 0 {
		c.Decrease = DefaultAdaptiveDecrease
	}
	if c.Floor == 0 {
		c.Floor = DefaultAdaptiveFloor
	}
	if c.DecreaseHold == 0 {
		c.DecreaseHold = DefaultAdaptiveDecreaseHold
	}
	if c.MaxDestinations == 0 {
		c.MaxDestinations = DefaultAdaptiveMaxDestinations
	}
	if c.ForgetAfter == 0 {
		c.ForgetAfter = DefaultAdaptiveForgetAfter
	}
	if c.MaxDestinationsPerTenant == 0 {
		c.MaxDestinationsPerTenant = DefaultAdaptiveMaxDestinationsPerTenant
	}
}

func (c *AdaptiveConfig) validate() error {
	switch {
	case c.Increase <= 0:
		return fmt.Errorf("redisq: adaptive increase %g: must be above 0", c.Increase)
	case c.IncreaseRatio < 0:
		return fmt.Errorf("redisq: adaptive increase ratio %g: must not be negative", c.IncreaseRatio)
	case c.Decrease <= 0 || c.Decrease >= 1:
		return fmt.Errorf("redisq: adaptive decrease %g: must be between 0 and 1, both excluded", c.Decrease)
	case c.Floor <= 0:
		return fmt.Errorf("redisq: adaptive floor %g: must be above 0", c.Floor)
	case c.Ceiling != 0 && c.Ceiling < c.Floor:
		return fmt.Errorf("redisq: adaptive ceiling %g: must be 0 (none) or at least the floor %g", c.Ceiling, c.Floor)
	case c.DecreaseHold < 0:
		return fmt.Errorf("redisq: adaptive decrease hold %s: must not be negative", c.DecreaseHold)
	case c.MaxDestinations < 1:
		return fmt.Errorf("redisq: adaptive max destinations %d: must be at least 1", c.MaxDestinations)
	case c.MaxDestinationsPerTenant < 1:
		return fmt.Errorf("redisq: adaptive max destinations per tenant %d: must be at least 1", c.MaxDestinationsPerTenant)
	case c.ForgetAfter < time.Second:
		return fmt.Errorf("redisq: adaptive forget-after %s: must be at least 1s", c.ForgetAfter)
	}
	return nil
}

// DestOutcome is what a worker saw of one destination since its last
// report.
type DestOutcome struct {
	// Destination names the downstream (a job type by default).
	Destination string
	// Accepted counts jobs the destination did not throttle.
	Accepted int
	// Throttled counts jobs it throttled (a 429, a 503 with Retry-After).
	Throttled int
	// RetryAfter is the longest Retry-After among them; 0 = none.
	RetryAfter time.Duration
}

// ReportDestinations moves the learned rate of each destination by the
// outcomes (dest_report.lua, one call for all): additive increase while it
// accepts, multiplicative decrease on a throttle (at most once per
// DecreaseHold), a stop until a Retry-After passes (at most MaxBackoff; for
// an outcome that also counts accepted jobs, only as long as the new rate
// takes to send the throttled ones), a floor and a ceiling. It returns the destinations refused because
// MaxDestinations were tracked already (they are not learned).
func (q *Queue) ReportDestinations(ctx context.Context, outs []DestOutcome) (refused []string, err error) {
	if q.global != nil {
		return q.global.ReportDestinations(ctx, outs)
	}
	if len(outs) == 0 {
		return nil, nil
	}
	a := q.cfg.Adaptive
	args := []any{q.keys.Prefix(), q.now(), a.Increase, a.Decrease, a.Floor, a.Ceiling, ms(a.DecreaseHold),
		a.MaxDestinations, ms(a.ForgetAfter), ms(q.cfg.MaxBackoff), a.IncreaseRatio}
	for _, o := range outs {
		args = append(args, o.Destination, o.Accepted, o.Throttled, ms(max(o.RetryAfter, 0)))
	}
	v, err := q.run(ctx, "dest_report", destReportScript, []string{q.keys.DestRates()}, args...)
	if err != nil {
		return nil, err
	}
	for _, d := range toList(toList(v)[0]) {
		refused = append(refused, toStr(d))
	}
	return refused, nil
}

// DestRate is one destination's learned state.
type DestRate struct {
	// Destination names the downstream.
	Destination string
	// Rate is the learned rate in jobs/s; 0 = not learned yet (no throttle
	// seen): the destination is not limited.
	Rate float64
	// StopUntilMs is when a Retry-After stop ends (ms since the epoch);
	// 0 = none.
	StopUntilMs int64
	// Accepted and Throttled count the jobs reported accepted and
	// throttled since the destination was first tracked (they start again
	// at 0 once it is forgotten, after ForgetAfter without reports): their
	// differences between two readings are its accepted and throttled jobs
	// per second (the dashboard's chart).
	Accepted, Throttled int64
	// LastReportMs is when it was last reported (ms since the epoch).
	LastReportMs int64
}

// DestRates are the learned rates read at NowMs (Redis TIME).
type DestRates struct {
	NowMs int64
	Rates []DestRate
}

// Stopped says whether d is stopped by a Retry-After at r.NowMs.
func (r *DestRates) Stopped(d DestRate) bool { return d.StopUntilMs > r.NowMs }

// StopEnd is the ms from nowMs until the first of the destinations named
// in held (job types whose rate held jobs, [AdmitResult.RateHeld]) that a
// Retry-After stops is free again; ok is false when none of them is
// stopped. A stopped type's limit is 0 for the window, so admission alone
// would wait for the window's end: a caller waits no longer than this.
func (r *DestRates) StopEnd(held map[string]int, nowMs int64) (ms int64, ok bool) {
	if r == nil {
		return 0, false
	}
	for _, d := range r.Rates {
		if _, h := held[d.Destination]; !h || d.StopUntilMs <= nowMs {
			continue
		}
		if w := d.StopUntilMs - nowMs; !ok || w < ms {
			ms, ok = w, true
		}
	}
	return ms, ok
}

// DestinationRates reads every tracked destination's learned rate and
// counts, in name order, in one round trip of a pipeline after the index.
func (q *Queue) DestinationRates(ctx context.Context) (*DestRates, error) {
	if q.global != nil {
		return q.global.DestinationRates(ctx)
	}
	zs, err := q.rdb.ZRangeWithScores(ctx, q.keys.DestRates(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: destination rates: %w", err)
	}
	slices.SortFunc(zs, func(a, b redis.Z) int { return strings.Compare(toStr(a.Member), toStr(b.Member)) })
	names := make([]string, len(zs))
	for i, z := range zs {
		names[i] = toStr(z.Member)
	}
	pipe := q.rdb.Pipeline()
	tm := pipe.Time(ctx)
	cmds := make([]interface{ Val() []any }, len(names))
	for i, n := range names {
		cmds[i] = pipe.HMGet(ctx, q.keys.DestRate(n), "rate", "stop", "tacc", "tthr")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: destination rates: %w", err)
	}
	out := &DestRates{NowMs: tm.Val().UnixMilli()}
	if q.cfg.Clock != nil {
		out.NowMs = q.cfg.Clock().UnixMilli()
	}
	for i, n := range names {
		v := cmds[i].Val()
		r, _ := strconv.ParseFloat(toStr(v[0]), 64)
		out.Rates = append(out.Rates, DestRate{Destination: n, Rate: r, StopUntilMs: toInt(v[1]),
			Accepted: toInt(v[2]), Throttled: toInt(v[3]), LastReportMs: int64(zs[i].Score)})
	}
	return out, nil
}

// WithLearnedRates makes the call's per-type rate limits the learned rates
// of the destinations that are job types, each capped by the type's own
// limit ([Config.TypeLimits]): a learned rate of r jobs/s allows
// max(1, floor(r × Window)) jobs per window, a destination stopped by a
// Retry-After none. Types not learned keep their own limits. A learned
// limit's pacer carries no credit for gaps between calls (a static one
// does, [TypeCreditDivisor]). nil changes nothing.
func WithLearnedRates(r *DestRates) AdmitOption {
	return func(o *admitOptions) { o.learned = r }
}

// limitsWith is the scripts' type-limit argument with the learned rates of
// r folded in. A learned limit carries no credit in the type's pacer: the
// rate was learned from what the destination accepted as admitted, and a
// catch-up burst meets a downstream's token bucket at once.
func (q *Queue) limitsWith(r *DestRates) string {
	if r == nil || len(r.Rates) == 0 {
		return q.typeLimits
	}
	return q.limitsFrom(q.cfg.TypeLimits, r)
}

// limitsFrom is limitsWith over the static limits static instead of
// Config.TypeLimits.
func (q *Queue) limitsFrom(static map[string]int, r *DestRates) string {
	if r == nil || len(r.Rates) == 0 {
		return typeLimitsArg(static)
	}
	limits, learned := q.limitsMap(static, r)
	return typeLimitsArgLearned(limits, learned)
}

// limitsMap is static with the learned rates of r folded in (each as
// [Queue.learnedPerWindow], where lower than a static limit of its name),
// and the names whose limit is learned.
func (q *Queue) limitsMap(static map[string]int, r *DestRates) (limits map[string]int, learned map[string]bool) {
	limits = make(map[string]int, len(static))
	for t, n := range static {
		limits[t] = n
	}
	if r == nil {
		return limits, nil
	}
	learned = map[string]bool{}
	for _, d := range r.Rates {
		n, ok := q.learnedPerWindow(r, d)
		if !ok {
			continue
		}
		if s, ok := limits[d.Destination]; !ok || n < s {
			limits[d.Destination] = n
			learned[d.Destination] = true
		}
	}
	return limits, learned
}

// GrantedLimits are the limits per [Config.Window] that the grants split
// between the shards beyond [Config.TypeLimits] (docs/ARCHITECTURE.md
// §11.1): the learned rates of r, whole (0 while a destination is
// stopped), each where lower than a static limit of its name. nil when r
// has none.
func (q *Queue) GrantedLimits(r *DestRates) map[string]int {
	if r == nil || len(r.Rates) == 0 {
		return nil
	}
	g := q
	if q.global != nil {
		g = q.global
	}
	limits, learned := g.limitsMap(g.cfg.TypeLimits, r)
	out := make(map[string]int, len(learned))
	for d := range learned {
		out[d] = limits[d]
	}
	return out
}

// learnedPerWindow is d's learned limit in jobs per window: max(1,
// floor(rate × Window)), 0 while it is stopped; ok is false when it has
// no learned rate.
func (q *Queue) learnedPerWindow(r *DestRates, d DestRate) (n int, ok bool) {
	if r.Stopped(d) {
		return 0, true
	}
	if d.Rate <= 0 {
		return 0, false
	}
	rate := d.Rate
	if q.global != nil {
		// a shard's even part, as of the static limits (shardConfig)
		rate /= float64(len(q.global.shards))
	}
	return max(1, int(math.Floor(rate*q.cfg.Window.Seconds()))), true
}

// LearnedRatesTTL is how long [Queue.LearnedRates] reuses a reading.
const LearnedRatesTTL = 100 * time.Millisecond

// learnedCache keeps the last reading of the learned rates until
// expires.
type learnedCache struct {
	mu      sync.Mutex
	expires time.Time
	r       *DestRates
}

// LearnedRates returns the learned rates for [WithLearnedRates], read at
// most once per [LearnedRatesTTL], and again as soon as a stop it shows
// ends (a reading that still shows a stop that has ended would hold the
// destination's jobs until the window's end); nil when the adaptive rate
// is off. When Redis cannot be read it returns the last reading (nil at
// first) and the error.
func (q *Queue) LearnedRates(ctx context.Context) (*DestRates, error) {
	if q.global != nil {
		return q.global.LearnedRates(ctx)
	}
	if !q.cfg.Adaptive.Enabled {
		return nil, nil
	}
	c := q.learned
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r != nil && time.Now().Before(c.expires) {
		return c.r, nil
	}
	r, err := q.DestinationRates(ctx)
	if err != nil {
		return c.r, err
	}
	ttl := LearnedRatesTTL
	for _, d := range r.Rates {
		if r.Stopped(d) {
			ttl = min(ttl, time.Duration(d.StopUntilMs-r.NowMs)*time.Millisecond)
		}
	}
	c.r, c.expires = r, time.Now().Add(ttl)
	return r, nil
}
