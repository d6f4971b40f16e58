package redisq

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// Admission modes (docs/ARCHITECTURE.md §5).
const (
	// ModeSeed is the fixed-window check: a denied job is parked in the
	// non-ready queue with the congestion-aware backoff.
	ModeSeed = "seed"
	// ModePaced skips a tenant whose share of the window is used up (it
	// keeps its place), gives unused capacity to tenants still waiting, and
	// spreads admissions over the window. Nothing is parked for rate reasons.
	ModePaced = "paced"
)

// Defaults of the [Config] fields; bulkaction's settings use the same
// values.
const (
	DefaultMode             = ModePaced
	DefaultGlobalLimit      = 10000
	DefaultWindow           = time.Second
	DefaultActiveStaleAfter = 30 * time.Second
	DefaultLease            = 30 * time.Second
	DefaultClaimTTL         = 30 * time.Second
	DefaultBaseBackoff      = time.Second
	DefaultMaxBackoff       = 120 * time.Second
	DefaultJobTTL           = 24 * time.Hour
	DefaultGroupTTL         = 7 * 24 * time.Hour
	DefaultHistoryLen       = 360
	// BurstDivisor: the default Burst is Window/BurstDivisor.
	BurstDivisor = 25
	// TypeCreditDivisor: in ModePaced a rate-limited type whose jobs were
	// held by its rate in the last call that met them carries the credit
	// of the gap since, at most Window/TypeCreditDivisor (lib.lua
	// TYPE_CREDIT), so admission calls further apart than Burst still
	// admit it at its limit.
	TypeCreditDivisor = 10
)

// Config configures a Queue. Zero values mean the defaults stated per field.
type Config struct {
	// Prefix of every key; default DefaultPrefix. May carry a hash tag,
	// but not with more than one shard.
	Prefix string
	// Shards is the number of logical shards, 1..[MaxShards]; 0 means 1,
	// today's keys. With N > 1 each tenant's keys carry the hash tag of its
	// shard ([ShardOf], [ShardPrefix]) and the Queue routes every call to
	// them (docs/ARCHITECTURE.md §11.1). N is fixed for an installation's
	// life: [New] refuses another ([ErrShardCount]).
	Shards int
	// Alpha weighs a group's progress in its score (docs/ARCHITECTURE.md
	// §4). Zero, the default, means pure age order (round robin).
	Alpha float64
	// Mode is the admission mode: ModePaced (default) or ModeSeed.
	Mode string
	// GlobalLimit is the number of jobs admitted per Window across all
	// tenants; default 10000. Each active tenant's share of it is
	// max(1, floor(GlobalLimit / active tenants)) * its weight.
	GlobalLimit int
	// Window is the rate-limit window; default 1s.
	Window time.Duration
	// Burst is how far ahead of the even pace the paced mode may admit;
	// default Window/25, which bounds any sliding window to 1.04x the limit.
	Burst time.Duration
	// TypeLimits caps, per job type, the jobs admitted and released per
	// Window, beside GlobalLimit (docs/ARCHITECTURE.md §5); a type not
	// listed has no limit of its own. Each limit is at least 1. They apply
	// in the gated modes: in ModePaced a pacer per type also spreads its
	// jobs with the global pacer's Burst, plus the credit of the gap since
	// the last call when that call held them (at most
	// Window/[TypeCreditDivisor]); in both, a job whose type has no rate
	// left is held (its group keeps its place), never parked.
	TypeLimits map[string]int
	// ActiveStaleAfter removes a tenant from the active set when it has not
	// asked for capacity for this long; default 30s.
	ActiveStaleAfter time.Duration
	// Lease is how long an admitted job may stay unconfirmed before it can
	// be re-claimed; default 30s.
	Lease time.Duration
	// ClaimTTL is how long a worker's claim of a job lasts without renewal
	// ([Queue.RenewClaims]); default 30s. Only a run whose claim expired
	// (its worker stopped, or lost Redis for this long) may be taken as
	// lost and run again (docs/ARCHITECTURE.md §6.5). Workers renew their
	// claims every third of it.
	ClaimTTL time.Duration
	// BaseBackoff is the backoff of an uncongested group; default 1s.
	BaseBackoff time.Duration
	// MaxBackoff caps any backoff; default 120s.
	MaxBackoff time.Duration
	// DisableCongestion makes every backoff the fixed BaseBackoff. The zero
	// value keeps congestion control on.
	DisableCongestion bool
	// JobTTL is how long a terminal job's hash is kept; default 24h.
	JobTTL time.Duration
	// DropSucceededJobs deletes a job's hash as soon as its success is
	// recorded instead of keeping it JobTTL (failed and cancelled jobs are
	// kept). Its group's counts stay exact, its id stays in the group's id
	// set (a re-sent job is still a duplicate, a second result still a
	// duplicate), but the job itself can no longer be read. The zero value
	// keeps succeeded jobs, as the other terminal ones.
	DropSucceededJobs bool
	// GroupTTL is how long an ended group's meta is kept; default 7 days.
	GroupTTL time.Duration
	// HistoryLen is how many congestion snapshots are kept; default 360.
	HistoryLen int
	// TenantMaxQueuedJobs is the default most queued jobs of a tenant
	// (docs/ARCHITECTURE.md §5): jobs accepted and not terminal yet, in
	// groups that have not ended. Zero, the default, means unlimited; a
	// tenant's own quota ([Queue.SetTenantQuota]) replaces it.
	TenantMaxQueuedJobs int64
	// TenantMaxActiveGroups is the default most active groups of a tenant:
	// groups that exist and have not ended. Zero, the default, means
	// unlimited; a tenant's own quota replaces it.
	TenantMaxActiveGroups int64
	// ScriptTimeBudget is how long one call of a script that goes through
	// many jobs (a cancel step, a release) keeps at it before it leaves the
	// rest to the next call; default [DefaultScriptTimeBudget], negative
	// means no budget (the job counts alone bound the calls).
	ScriptTimeBudget time.Duration
	// Adaptive configures the adaptive rate per destination
	// ([Queue.ReportDestinations], [WithLearnedRates]); its zero value
	// means its defaults.
	Adaptive AdaptiveConfig
	// Observer, when set, receives every script's duration.
	Observer Observer
	// Clock, when set, replaces Redis TIME inside scripts (tests only).
	Clock func() time.Time
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.GlobalLimit == 0 {
		c.GlobalLimit = DefaultGlobalLimit
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Burst == 0 {
		c.Burst = c.Window / BurstDivisor
	}
	if c.ActiveStaleAfter == 0 {
		c.ActiveStaleAfter = DefaultActiveStaleAfter
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.ClaimTTL == 0 {
		c.ClaimTTL = DefaultClaimTTL
	}
	if c.ScriptTimeBudget == 0 {
		c.ScriptTimeBudget = DefaultScriptTimeBudget
	}
	if c.BaseBackoff == 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.JobTTL == 0 {
		c.JobTTL = DefaultJobTTL
	}
	if c.GroupTTL == 0 {
		c.GroupTTL = DefaultGroupTTL
	}
	if c.HistoryLen == 0 {
		c.HistoryLen = DefaultHistoryLen
	}
	c.Adaptive.setDefaults()
}

func (c *Config) validate() error {
	switch c.Mode {
	case ModeSeed, ModePaced:
	default:
		return fmt.Errorf("redisq: mode %q: must be %s or %s", c.Mode, ModePaced, ModeSeed)
	}
	if c.Shards < 0 || c.Shards > MaxShards {
		return fmt.Errorf("redisq: shards %d: must be between 1 and %d", c.Shards, MaxShards)
	}
	if c.Shards > 1 && hasHashTag(c.Prefix) {
		return fmt.Errorf("redisq: prefix %q carries a hash tag: with %d shards each shard's keys carry their own", c.Prefix, c.Shards)
	}
	if c.GlobalLimit < 1 {
		return fmt.Errorf("redisq: global limit %d: must be at least 1", c.GlobalLimit)
	}
	if c.Window < time.Millisecond {
		return fmt.Errorf("redisq: window %s: must be at least 1ms", c.Window)
	}
	if c.Burst < 0 || c.Burst > c.Window {
		return fmt.Errorf("redisq: burst %s: must be between 0 and the window (%s)", c.Burst, c.Window)
	}
	if c.MaxBackoff < c.BaseBackoff {
		return fmt.Errorf("redisq: max backoff %s: must not be below the base backoff %s", c.MaxBackoff, c.BaseBackoff)
	}
	if c.TenantMaxQueuedJobs < 0 || c.TenantMaxActiveGroups < 0 {
		return fmt.Errorf("redisq: tenant quotas %d queued jobs, %d active groups: must be >= 0 (0 = unlimited)",
			c.TenantMaxQueuedJobs, c.TenantMaxActiveGroups)
	}
	if c.Lease < time.Millisecond {
		return fmt.Errorf("redisq: lease %s: must be at least 1ms", c.Lease)
	}
	if c.ClaimTTL < time.Second {
		return fmt.Errorf("redisq: claim TTL %s: must be at least 1s", c.ClaimTTL)
	}
	if err := c.Adaptive.validate(); err != nil {
		return err
	}
	for t, n := range c.TypeLimits {
		if err := contracts.ValidateType(t); err != nil {
			return fmt.Errorf("redisq: type limit %q: %w", t, err)
		}
		if n < 1 {
			return fmt.Errorf("redisq: type limit %s=%d: must be at least 1", t, n)
		}
	}
	return nil
}

// typeLimitsArg encodes limits for the scripts: "type=n,..." in type order
// ("" = none).
func typeLimitsArg(limits map[string]int) string { return typeLimitsArgLearned(limits, nil) }

// typeLimitsArgLearned is typeLimitsArg with the types in learned marked
// '~': their limits are learned rates, which carry no credit (lib.lua).
func typeLimitsArgLearned(limits map[string]int, learned map[string]bool) string {
	return typeLimitsArgMax(limits, learned, nil)
}

// typeLimitsArgMax is typeLimitsArgLearned with, for each name in callMax,
// the most jobs of it the call admits ('@m', lib.lua type_limits_parse).
func typeLimitsArgMax(limits map[string]int, learned map[string]bool, callMax map[string]int) string {
	types := make([]string, 0, len(limits))
	for t := range limits {
		types = append(types, t)
	}
	sort.Strings(types)
	var b strings.Builder
	for i, t := range types {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(limits[t]))
		if learned[t] {
			b.WriteByte('~')
		}
		if m, ok := callMax[t]; ok {
			b.WriteByte('@')
			b.WriteString(strconv.Itoa(max(m, 0)))
		}
	}
	return b.String()
}

// Queue is all Redis state of the system: the fair queue, the rate limiter,
// the non-ready queue, leases and group accounting. It is safe for
// concurrent use, and any number of processes may share one Redis.
type Queue struct {
	rdb  redis.UniversalClient
	keys Keys
	cfg  Config
	obs  Observer
	// typeLimits is cfg.TypeLimits as the scripts take it.
	typeLimits string
	learned    *learnedCache
	// shards are the sub-queues of the logical shards (none with one
	// shard: q is its own only shard); global, in a sub-queue, is the
	// Queue that owns it and the cross-shard keys (shards.go).
	shards []*Queue
	global *Queue
	// admitTurnNo moves the shard a sequential sharded Admit starts from
	// at each call
	admitTurnNo atomic.Uint64
}

// g is the queue of the cross-shard keys: the owning Queue for a shard's
// sub-queue, else q.
func (q *Queue) g() *Queue {
	if q.global != nil {
		return q.global
	}
	return q
}

// New returns a Queue on rdb. It checks cfg and loads the scripts.
func New(ctx context.Context, rdb redis.UniversalClient, cfg Config) (*Queue, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := &Queue{rdb: rdb, keys: NewKeys(cfg.Prefix), cfg: cfg, obs: cfg.Observer, typeLimits: typeLimitsArg(cfg.TypeLimits),
		learned: &learnedCache{}}
	if err := q.newShards(ctx, rdb, cfg); err != nil {
		return nil, err
	}
	if err := q.loadScripts(ctx); err != nil {
		return nil, err
	}
	return q, nil
}

// Config returns the queue's configuration with defaults filled in.
func (q *Queue) Config() Config { return q.cfg }

// Ping checks that Redis answers.
func (q *Queue) Ping(ctx context.Context) error { return q.rdb.Ping(ctx).Err() }

var allScripts = map[string]*redis.Script{
	"enqueue": enqueueScript, "admit": admitScript, "record": recordScript,
	"seal": sealScript, "cancel": cancelScript, "release": releaseScript,
	"reclaim": reclaimScript, "claim": claimScript, "retry": retryScript, "correct": correctScript,
	"pause": pauseScript, "resume": resumeScript, "progress": progressScript,
	"correct_quotas": quotasScript, "position": positionScript, "dest_report": destReportScript,
}

// ScriptName names the script of this package whose SHA1 is sha (as
// EVALSHA, SLOWLOG and LATENCY show it), or returns "" for any other.
func ScriptName(sha string) string {
	return scriptNames[strings.ToLower(sha)]
}

func (q *Queue) loadScripts(ctx context.Context) error {
	for name, s := range allScripts {
		if err := s.Load(ctx, q.rdb).Err(); err != nil {
			return fmt.Errorf("redisq: load %s script: %w", name, err)
		}
	}
	return nil
}

// now is the clock override for scripts: "" means Redis TIME.
func (q *Queue) now() string {
	if q.cfg.Clock == nil {
		return ""
	}
	return strconv.FormatInt(q.cfg.Clock().UnixMilli(), 10)
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// micros is a time budget in µs for a script: 0 = none.
func micros(d time.Duration) int64 { return max(d.Microseconds(), 0) }

func secs(d time.Duration) int64 { return int64(d / time.Second) }

// reply helpers

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func toStr(v any) string {
	s, _ := v.(string)
	return s
}

func toList(v any) []any {
	l, _ := v.([]any)
	return l
}

// boolArg is a boolean script argument: "1" or "0".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
