package redisq

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// CongestionLevel grades a group's congestion by its backoff relative to the
// base backoff.
type CongestionLevel string

// Congestion levels, by backoff/base ratio: <= 1 NONE, < 3 LOW, < 10
// MODERATE, < 30 HIGH, else CRITICAL.
const (
	CongestionNone     CongestionLevel = "NONE"
	CongestionLow      CongestionLevel = "LOW"
	CongestionModerate CongestionLevel = "MODERATE"
	CongestionHigh     CongestionLevel = "HIGH"
	CongestionCritical CongestionLevel = "CRITICAL"
)

// CongestionLevels lists the levels from best to worst.
var CongestionLevels = []CongestionLevel{CongestionNone, CongestionLow, CongestionModerate, CongestionHigh, CongestionCritical}

func (l CongestionLevel) rank() int {
	for i, x := range CongestionLevels {
		if x == l {
			return i
		}
	}
	return 0
}

// Backoff is the congestion-aware backoff: base + floor(nonReady /
// rate) seconds, clamped to max; a rate below 1 counts as 1. Rate shares are
// per tenant (docs/ARCHITECTURE.md §5): the rate is the share of the group's
// tenant of the global limit per window (1s by default), and nonReady the
// tenant's count of jobs in the non-ready queue.
func Backoff(nonReadyCount, ratePerSec int64, base, max time.Duration) time.Duration {
	if ratePerSec < 1 {
		ratePerSec = 1
	}
	b := base + time.Duration(nonReadyCount/ratePerSec)*time.Second
	if b > max {
		b = max
	}
	return b
}

// Level grades a backoff against the base backoff.
func Level(backoff, base time.Duration) CongestionLevel {
	if base <= 0 {
		return CongestionNone
	}
	r := float64(backoff) / float64(base)
	switch {
	case r <= 1:
		return CongestionNone
	case r < 3:
		return CongestionLow
	case r < 10:
		return CongestionModerate
	case r < 30:
		return CongestionHigh
	}
	return CongestionCritical
}

// EstimateSeconds is the completion estimate: ceil(pending / rate).
func EstimateSeconds(pending, ratePerSec int64) int64 {
	if ratePerSec < 1 {
		ratePerSec = 1
	}
	return int64(math.Ceil(float64(pending) / float64(ratePerSec)))
}

// RetryResult is the outcome of Retry.
type RetryResult struct {
	// Outcome: "parked", "stale" (the attempt is not current) or
	// "cancelled" (the group was cancelled; the job is counted as cancelled).
	Outcome string
	// Delay until the job is due again.
	Delay time.Duration
	// NonReadyCount is the group's non-ready count after parking.
	NonReadyCount int64
}

// Retry sends a running job back to the non-ready queue with the
// congestion-aware backoff; retryAfter >= 0 (a worker's Retry-After)
// overrides it, capped by Config.MaxBackoff; retryAfter < 0 means none. The
// job frees its slot of the group's in-flight limit.
func (q *Queue) Retry(ctx context.Context, g contracts.GroupRef, jobID string, attempt int, retryAfter time.Duration, errText string,
	opts ...RetryOption) (*RetryResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Retry(ctx, g, jobID, attempt, retryAfter, errText, opts...)
	}
	var o retryOptions
	for _, opt := range opts {
		opt(&o)
	}
	throttled := "0"
	if o.throttled {
		throttled = "1"
	}
	ra := int64(-1)
	if retryAfter >= 0 {
		ra = ms(retryAfter)
	}
	congestion := "1"
	if q.cfg.DisableCongestion {
		congestion = "0"
	}
	v, err := q.run(ctx, "retry", retryScript,
		[]string{q.keys.Job(g, jobID), q.keys.GroupMeta(g), q.keys.ActiveTenants(), q.keys.TenantWeights()},
		q.keys.Prefix(), g.Tenant, g.ID, jobID, attempt, q.now(), ra, int64(q.cfg.GlobalLimit),
		ms(q.cfg.BaseBackoff), ms(q.cfg.MaxBackoff), congestion, errText, secs(q.cfg.JobTTL), throttled, q.cfg.Alpha)
	if err != nil {
		return nil, err
	}
	l := toList(v)
	return &RetryResult{Outcome: toStr(l[0]), Delay: time.Duration(toInt(l[1])) * time.Millisecond, NonReadyCount: toInt(l[2])}, nil
}

// RetryOption configures one Retry call.
type RetryOption func(*retryOptions)

type retryOptions struct{ throttled bool }

// Throttled marks the attempt as rate limited (a 429 from downstream): it
// is counted in the job's throttles ([Claimed.Throttles]), which have a cap
// of their own, not as an error against the retry budget.
func Throttled() RetryOption { return func(o *retryOptions) { o.throttled = true } }

// CorrectCounters re-derives the non-ready counters of groups and tenants
// (counters can drift after failures) from the non-ready queue: the
// counters of the groups on the stuck watch list ([Keys.StuckWatch]: every
// group that started and has not ended), each from its own job ids, and
// then those of their tenants (and of the tenants with quota counts) as the
// sums of their groups'. It also re-derives the tenant quotas' counts
// (docs/ARCHITECTURE.md §5) from the groups' metas: each tenant's active
// groups and queued jobs. It returns how many counters (and active group
// entries) were wrong. With shards every shard is corrected on its own,
// concurrently, and the wrong counters summed.
//
// No script call goes through more than [DefaultSweepChunk] job ids
// ([SweepChunk] sets it), so a pass costs a few milliseconds per call
// whatever the size of the non-ready queue; a large group takes several
// calls, and is left for the next pass if its jobs entered or left the
// queue meanwhile (its tenant too). Backed-off jobs of a group whose meta
// is gone are not counted: release takes them out of the queue.
func (q *Queue) CorrectCounters(ctx context.Context, opts ...SweepOption) (int, error) {
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int, error) { return s.CorrectCounters(ctx, opts...) })
	}
	fixed, err := q.correctNonReady(ctx, sweepOptionsOf(opts))
	if err != nil {
		return fixed, err
	}
	n, err := q.correctQuotas(ctx)
	return fixed + n, err
}

// CongestionState is a group's congestion state.
type CongestionState struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	// NonReadyCount counts the group's jobs in the non-ready queue.
	NonReadyCount int64 `json:"nonReadyCount"`
	// TenantNonReadyCount counts its tenant's: with RateLimitSpeed (the
	// tenant's share) it gives CurrentBackoffMs.
	TenantNonReadyCount int64           `json:"tenantNonReadyCount"`
	RateLimitSpeed      int64           `json:"rateLimitSpeed"`
	CurrentBackoffMs    int64           `json:"currentBackoffMs"`
	Level               CongestionLevel `json:"congestionLevel"`
	TotalThrottleCount  int64           `json:"totalThrottleCount"`
	LastThrottleAtMs    int64           `json:"lastThrottleAt"`
	LastBackoffMs       int64           `json:"lastBackoffMs"`
	AvgThrottlePerJob   float64         `json:"avgThrottlePerJob"`
	// EstimatedSeconds is how long the group's pending jobs (queued and
	// backed off) take at its current rate.
	EstimatedSeconds int64 `json:"estimatedSeconds"`
}

// Ref returns the group the state describes.
func (s *CongestionState) Ref() contracts.GroupRef {
	return contracts.GroupRef{Tenant: s.Tenant, ID: s.GroupID}
}

// Congestion returns a group's congestion state. Its rate (RateLimitSpeed)
// is its tenant's share of the global limit (with shards, of its shard's
// part of it, as admission and the backoff count it).
func (q *Queue) Congestion(ctx context.Context, g contracts.GroupRef) (*CongestionState, error) {
	if q.sharded() {
		return q.For(g.Tenant).Congestion(ctx, g)
	}
	pipe := q.rdb.Pipeline()
	cnt := pipe.Get(ctx, q.keys.CongestionCount(g))
	tcnt := pipe.Get(ctx, q.keys.TenantNonReady(g.Tenant))
	stats := pipe.HGetAll(ctx, q.keys.CongestionStats(g))
	active := pipe.SCard(ctx, q.keys.ActiveTenants())
	weight := pipe.HGet(ctx, q.keys.TenantWeights(), g.Tenant)
	pending := pipe.LLen(ctx, q.keys.GroupJobs(g))
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: congestion %s: %w", g, err)
	}
	rate := TenantShare(int64(q.cfg.GlobalLimit), active.Val(), ParseTenantWeight(weight.Val()))
	return q.congestionFrom(g, cnt.Val(), tcnt.Val(), stats.Val(), rate, pending.Val()), nil
}

func (q *Queue) congestionFrom(g contracts.GroupRef, count, tenantCount string, stats map[string]string, rate, pending int64) *CongestionState {
	n := func(s string) int64 { x, _ := strconv.ParseInt(s, 10, 64); return x }
	nonReady, tenantNonReady := n(count), n(tenantCount)
	backoff := Backoff(tenantNonReady, rate, q.cfg.BaseBackoff, q.cfg.MaxBackoff)
	avg, _ := strconv.ParseFloat(stats["avgThrottlePerJob"], 64)
	return &CongestionState{
		Tenant: g.Tenant, GroupID: g.ID, NonReadyCount: nonReady, TenantNonReadyCount: tenantNonReady, RateLimitSpeed: rate,
		CurrentBackoffMs: ms(backoff), Level: Level(backoff, q.cfg.BaseBackoff),
		TotalThrottleCount: n(stats["totalThrottleCount"]), LastThrottleAtMs: n(stats["lastThrottleAt"]),
		LastBackoffMs: n(stats["lastBackoffMs"]), AvgThrottlePerJob: avg,
		EstimatedSeconds: EstimateSeconds(pending+nonReady, rate),
	}
}

// CongestionSummary is the system-wide congestion picture.
type CongestionSummary struct {
	AtMs int64 `json:"at"`
	// ActiveTenants counts the tenants sharing the global limit.
	ActiveTenants int64 `json:"activeTenantCount"`
	// ActiveGroups counts the groups summarised ([Queue.CandidateGroups]).
	ActiveGroups  int64           `json:"activeGroupCount"`
	TotalNonReady int64           `json:"totalNonReadyCount"`
	WorstLevel    CongestionLevel `json:"worstCongestionLevel"`
	// WorstTenant and WorstGroupID name the group with the highest backoff
	// ("" when no group is summarised); see [CongestionSummary.WorstGroup].
	WorstTenant    string                    `json:"worstCongestionTenant"`
	WorstGroupID   string                    `json:"worstCongestionGroupId"`
	GroupsPerLevel map[CongestionLevel]int64 `json:"groupsPerLevel"`
	Groups         []*CongestionState        `json:"groups,omitempty"`
}

// WorstGroup returns the group with the highest backoff (the zero GroupRef
// when none).
func (s *CongestionSummary) WorstGroup() contracts.GroupRef {
	return contracts.GroupRef{Tenant: s.WorstTenant, ID: s.WorstGroupID}
}

// SystemCongestion summarises the congestion of every group that may have
// jobs waiting or backing off ([Queue.CandidateGroups]: the queued groups and
// those that started and have not ended): the worst group (highest
// backoff), the total non-ready count and how many groups are at each level.
// With shards every shard is summarised on its own (concurrently; each
// group's state as its shard computes it) and the summaries merged:
// ActiveTenants, ActiveGroups, TotalNonReady and GroupsPerLevel summed,
// Groups in one list sorted by tenant and groupId, the worst group the
// first of the highest backoff in that order, AtMs the time read once.
func (q *Queue) SystemCongestion(ctx context.Context) (*CongestionSummary, error) {
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	if q.sharded() {
		return q.mergedCongestion(ctx, now)
	}
	return q.systemCongestion(ctx, now)
}

// mergedCongestion is SystemCongestion of every shard, merged.
func (q *Queue) mergedCongestion(ctx context.Context, now int64) (*CongestionSummary, error) {
	parts, err := gather(q, func(s *Queue) (*CongestionSummary, error) { return s.systemCongestion(ctx, now) })
	if err != nil {
		return nil, err
	}
	out := &CongestionSummary{AtMs: now, WorstLevel: CongestionNone, GroupsPerLevel: map[CongestionLevel]int64{}}
	for _, l := range CongestionLevels {
		out.GroupsPerLevel[l] = 0
	}
	for _, p := range parts {
		out.ActiveTenants += p.ActiveTenants
		out.ActiveGroups += p.ActiveGroups
		out.TotalNonReady += p.TotalNonReady
		for l, n := range p.GroupsPerLevel {
			out.GroupsPerLevel[l] += n
		}
		out.Groups = append(out.Groups, p.Groups...)
	}
	slices.SortFunc(out.Groups, func(a, b *CongestionState) int { return compareGroups(a.Ref(), b.Ref()) })
	var worstBackoff int64 = -1
	for _, st := range out.Groups {
		if st.CurrentBackoffMs > worstBackoff {
			worstBackoff = st.CurrentBackoffMs
			out.WorstLevel, out.WorstTenant, out.WorstGroupID = st.Level, st.Tenant, st.GroupID
		}
	}
	return out, nil
}

// systemCongestion is SystemCongestion on q's own keys, at now.
func (q *Queue) systemCongestion(ctx context.Context, now int64) (*CongestionSummary, error) {
	groups, err := q.CandidateGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisq: congestion summary: %w", err)
	}
	pipe := q.rdb.Pipeline()
	activeCmd := pipe.SCard(ctx, q.keys.ActiveTenants())
	weightsCmd := pipe.HGetAll(ctx, q.keys.TenantWeights())
	type cmds struct {
		cnt     interface{ Val() string }
		stats   interface{ Val() map[string]string }
		pending interface{ Val() int64 }
	}
	cs := make([]cmds, len(groups))
	tenantCounts := map[string]interface{ Val() string }{}
	for i, g := range groups {
		cs[i] = cmds{pipe.Get(ctx, q.keys.CongestionCount(g)), pipe.HGetAll(ctx, q.keys.CongestionStats(g)), pipe.LLen(ctx, q.keys.GroupJobs(g))}
		if tenantCounts[g.Tenant] == nil {
			tenantCounts[g.Tenant] = pipe.Get(ctx, q.keys.TenantNonReady(g.Tenant))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: congestion summary: %w", err)
	}
	active, weights := activeCmd.Val(), weightsCmd.Val()
	s := &CongestionSummary{AtMs: now, ActiveTenants: active, ActiveGroups: int64(len(groups)), WorstLevel: CongestionNone,
		GroupsPerLevel: map[CongestionLevel]int64{}}
	for _, l := range CongestionLevels {
		s.GroupsPerLevel[l] = 0
	}
	var worstBackoff int64 = -1
	for i, g := range groups {
		rate := TenantShare(int64(q.cfg.GlobalLimit), active, ParseTenantWeight(weights[g.Tenant]))
		st := q.congestionFrom(g, cs[i].cnt.Val(), tenantCounts[g.Tenant].Val(), cs[i].stats.Val(), rate, cs[i].pending.Val())
		s.Groups = append(s.Groups, st)
		s.TotalNonReady += st.NonReadyCount
		s.GroupsPerLevel[st.Level]++
		if st.CurrentBackoffMs > worstBackoff {
			worstBackoff = st.CurrentBackoffMs
			s.WorstLevel, s.WorstTenant, s.WorstGroupID = st.Level, g.Tenant, g.ID
		}
	}
	return s, nil
}

// Snapshot records the current congestion summary (without per-group
// detail) in the bounded history (Config.HistoryLen entries). With shards
// it records the summary merged over every shard ([Queue.SystemCongestion])
// in one history of the cross-shard keys, so History reads the whole
// installation's, one entry per call.
func (q *Queue) Snapshot(ctx context.Context) (*CongestionSummary, error) {
	s, err := q.SystemCongestion(ctx)
	if err != nil {
		return nil, err
	}
	slim := *s
	slim.Groups = nil
	b, _ := json.Marshal(slim)
	pipe := q.rdb.TxPipeline()
	pipe.RPush(ctx, q.keys.CongestionHistory(), b)
	pipe.LTrim(ctx, q.keys.CongestionHistory(), int64(-q.cfg.HistoryLen), -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: congestion snapshot: %w", err)
	}
	return s, nil
}

// History returns up to n of the latest congestion snapshots, oldest first
// (with shards, those the Queue recorded over every shard; see
// [Queue.Snapshot]).
func (q *Queue) History(ctx context.Context, n int) ([]CongestionSummary, error) {
	raw, err := q.rdb.LRange(ctx, q.keys.CongestionHistory(), int64(-n), -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: congestion history: %w", err)
	}
	out := make([]CongestionSummary, 0, len(raw))
	for _, r := range raw {
		var s CongestionSummary
		if err := json.Unmarshal([]byte(r), &s); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// clockMs is the time scripts see, in ms.
func (q *Queue) clockMs(ctx context.Context) (int64, error) {
	if q.cfg.Clock != nil {
		return q.cfg.Clock().UnixMilli(), nil
	}
	t, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: time: %w", err)
	}
	return t.UnixMilli(), nil
}
