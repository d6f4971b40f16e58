package redisq

import (
	"strconv"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "bulk-action:"

// Keys builds every Redis key of the system (docs/ARCHITECTURE.md §3). Scripts that must
// build a key of a group they discover receive the prefix and build it the
// same way; the tests check both agree. No key built from a tenant, group or
// job id can equal a system key, whatever the id (a test checks it).
//
// A group is named by (tenant, groupId). Inside Redis its group key is
// "<tenant>:<groupId>" (tokens never contain ':'): per-group keys are
// P group:<tenant>:<gid>:meta|jobs|queued|ids|progress, job hashes P job:<tenant>:<gid>:<jid>,
// and the members of the inflight and non-ready ZSETs "<tenant>:<gid>:<jid>".
type Keys struct{ prefix string }

// NewKeys returns the key builder for prefix ("" = DefaultPrefix). The prefix
// may carry a hash tag ("{bulk-action}:") so all keys share one cluster slot.
func NewKeys(prefix string) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keys{prefix: prefix}
}

// Prefix is the key prefix.
func (k Keys) Prefix() string { return k.prefix }

// FairQueue is the ZSET of the tenants waiting at one priority level, scored
// by each tenant's virtual time (docs/ARCHITECTURE.md §4).
func (k Keys) FairQueue(level contracts.Priority) string {
	return k.prefix + "fair-queue:" + string(level)
}

// FairQueues are the three level ZSETs in serving order.
func (k Keys) FairQueues() []string {
	return []string{k.FairQueue(contracts.PriorityHigh), k.FairQueue(contracts.PriorityNormal), k.FairQueue(contracts.PriorityLow)}
}

// TenantGroups is the ZSET of one tenant's groups waiting at one level,
// scored by the group fair score; its members are [Keys.GroupMember]s.
func (k Keys) TenantGroups(tenant string, level contracts.Priority) string {
	return k.prefix + "tenant:" + tenant + ":groups:" + string(level)
}

// GroupMember is the member a group has in its tenant's ZSET
// ([Keys.TenantGroups]): its groupId.
func (k Keys) GroupMember(g contracts.GroupRef) string { return g.ID }

// TenantClock is the HASH of each level's virtual time for tenants (field:
// the level): the virtual time of the tenant served last there. A tenant
// that becomes non-empty at a level enters at it.
func (k Keys) TenantClock() string { return k.prefix + "fair-queue:tenant-clock" }

// TenantWeights is the HASH tenant → weight (1..1000; absent = 1) of the
// tenant level of the fair queue and of the rate shares.
func (k Keys) TenantWeights() string { return k.prefix + "tenant-weights" }

// TenantQuotas is the HASH of the tenants' own quotas (docs/ARCHITECTURE.md
// §5): field "<tenant>:queued" the most queued jobs, "<tenant>:groups" the
// most active groups (0 = unlimited); a tenant without a field has the
// default ([Config.TenantMaxQueuedJobs], [Config.TenantMaxActiveGroups]).
func (k Keys) TenantQuotas() string { return k.prefix + "tenant-quotas" }

// TenantActiveGroups is the SET of a tenant's groups (groupIds) that exist
// and have not ended: its active groups for the tenant quotas.
func (k Keys) TenantActiveGroups(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":active-groups"
}

// TenantQueuedJobs counts a tenant's queued jobs for the tenant quotas: the
// jobs of its active groups ([Keys.TenantActiveGroups]) that are not
// terminal yet.
func (k Keys) TenantQueuedJobs(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":queued-jobs"
}

// QuotaTenants is the SET of tenants with active groups or queued jobs,
// which the counter correction ([Queue.CorrectCounters]) goes through.
func (k Keys) QuotaTenants() string { return k.prefix + "quota-tenants" }

// GroupIndex lists every group by creation time (score ms, member
// "<tenant>:<gid>"); written by enqueue.lua, pruned by [Queue.ListGroups].
func (k Keys) GroupIndex() string { return k.prefix + "group-index" }

// TenantGroupIndex lists a tenant's groups by creation time (score ms,
// member gid).
func (k Keys) TenantGroupIndex(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":group-index"
}

// GroupRetryOf holds the id of the group a retry group was made from
// (POST …/retry-failed).
func (k Keys) GroupRetryOf(g contracts.GroupRef) string {
	return k.prefix + "group:" + g.Tenant + ":" + g.ID + ":retry-of"
}

// GroupRetries lists the retry groups made from a group, oldest first.
func (k Keys) GroupRetries(g contracts.GroupRef) string {
	return k.prefix + "group:" + g.Tenant + ":" + g.ID + ":retries"
}

// Idempotency is the key of an HTTP Idempotency-Key of a scope (a tenant or
// the admin) by its hash.
func (k Keys) Idempotency(scope, hash string) string {
	return k.prefix + "idempotency:" + scope + ":" + hash
}

// VClock is the fair queue's virtual clock: a strictly increasing time that
// orders groups served within the same millisecond.
func (k Keys) VClock() string { return k.prefix + "fair-queue:vclock" }

// GroupJobs is the LIST of a group's queued job ids.
func (k Keys) GroupJobs(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":jobs"
}

// GroupQueued is the HASH of the group's queued jobs that have not left
// its job list ([Keys.GroupJobs]) yet: field the job id, value the job's
// record (type, trace, createdAt and payload; jobhash.go). Such a job has
// no hash ([Keys.Job]) until it first leaves the list; [ReadJob] reads a
// job in either place.
func (k Keys) GroupQueued(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":queued"
}

// GroupMeta is the HASH of a group's counters and state.
func (k Keys) GroupMeta(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":meta"
}

// GroupIDs is the SET of the ids of the group's jobs that left its job list
// ([Keys.GroupJobs]: admitted, parked or cancelled). With the list it holds
// every job id the group ever accepted: a queued job is known by its record
// ([Keys.GroupQueued]) or its hash, and a job that left the list by this set, for as long as the group lives,
// whether or not its hash expired.
func (k Keys) GroupIDs(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":ids"
}

// GroupProgress is the capped LIST of a group's progress samples, newest
// first: "<ms>:<done+cancelled>", written by the aggregators at most every
// [ProgressMinGap] and trimmed to [ProgressKeep] entries ([Queue.RecordProgress]).
// Status measures a group's rate over the last [ProgressWindow] of them.
func (k Keys) GroupProgress(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":progress"
}

// GroupFailures is the ZSET of a group's failed jobs (member: jobId), scored
// by when each failure was recorded (ms), trimmed to the newest
// [MaxFailuresKept]; it expires with the group's other keys ([Queue.Failures]).
func (k Keys) GroupFailures(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":failures"
}

// Job is the HASH of one job that has left its group's job list at least
// once (its fields: jobhash.go); a queued job has a record in
// [Keys.GroupQueued] instead.
func (k Keys) Job(g contracts.GroupRef, jid string) string {
	return k.prefix + "job:" + groupKey(g) + ":" + jid
}

// NonReadyQueue is the ZSET of backed-off jobs, scored by due time (ms).
func (k Keys) NonReadyQueue() string { return k.prefix + "non-ready-queue" }

// Inflight is the ZSET of leased jobs, scored by lease deadline (ms).
// It, [Keys.Claims] and [Keys.ReadyReserved] also hold a pin, a member
// without ':' scored +inf that keeps them in Redis's skiplist encoding
// (lib.lua ZPIN): a count of their jobs leaves it out.
func (k Keys) Inflight() string { return k.prefix + "inflight" }

// Claims is the ZSET of the claims of running jobs: member "<tenant>:<gid>:<jid>",
// score the time (ms) the claim expires unless its worker renews it.
func (k Keys) Claims() string { return k.prefix + "claims" }

// HoldersGone is the ZSET of the holders (worker processes) declared
// stopped, scored by the time (ms) of the declaration.
func (k Keys) HoldersGone() string { return k.prefix + "holders-gone" }

// RateLimitTenant is a tenant's fixed-window counter. Its "tenant:" segment
// keeps it apart from the system's rate keys whatever the tenant is named.
func (k Keys) RateLimitTenant(tenant string, window int64) string {
	return k.prefix + "rate-limit:tenant:" + tenant + ":" + strconv.FormatInt(window, 10)
}

// RateLimitGlobal is the global fixed-window counter.
func (k Keys) RateLimitGlobal(window int64) string {
	return k.prefix + "rate-limit:global:" + strconv.FormatInt(window, 10)
}

// RatePacer holds the global pacer's theoretical arrival time (paced mode).
func (k Keys) RatePacer() string { return k.prefix + "rate-limit:pacer" }

// RateLimitType is a job type's fixed-window counter (per-type rate limits).
// Its "type:" segment keeps it apart from the tenant and global keys.
func (k Keys) RateLimitType(typ string, window int64) string {
	return k.prefix + "rate-limit:type:" + typ + ":" + strconv.FormatInt(window, 10)
}

// RateTypePacer holds a job type's pacer (paced mode, per-type rate limits).
func (k Keys) RateTypePacer(typ string) string { return k.prefix + "rate-limit:type:" + typ + ":pacer" }

// ActiveTenants is the SET of tenants sharing the global rate.
func (k Keys) ActiveTenants() string { return k.prefix + "active-tenants" }

// ActiveSeen scores each active tenant by when it last asked for capacity,
// so stale tenants can leave the active set.
func (k Keys) ActiveSeen() string { return k.prefix + "active-tenants:seen" }

// CongestionCount is a group's count of jobs in the non-ready queue.
func (k Keys) CongestionCount(g contracts.GroupRef) string {
	return k.prefix + "congestion:" + groupKey(g) + ":non-ready-count"
}

// TenantNonReady is a tenant's count of jobs in the non-ready queue: the
// congestion-aware backoff divides it by the tenant's rate share.
func (k Keys) TenantNonReady(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":non-ready-count"
}

// CongestionStats is a group's congestion statistics HASH.
func (k Keys) CongestionStats(g contracts.GroupRef) string {
	return k.prefix + "congestion:" + groupKey(g) + ":stats"
}

// ReadyReserved is the ZSET of the jobs of one type handed to READY that a
// measurement of READY may not show yet (the room reservations of
// [WithReadySeq]): member "<tenant>:<gid>:<jid>", score the READY sequence
// of its message once its publish is confirmed, or 2^52 + the time the
// reservation lapses while it is not. Its "ready:reserved:" segment keeps
// it apart from every other key whatever the type is named.
func (k Keys) ReadyReserved(typ string) string { return k.prefix + "ready:reserved:" + typ }

// ReadyFloor is the HASH type -> the READY sequence up to which the type's
// reservations were pruned: a measurement older than it is refused.
func (k Keys) ReadyFloor() string { return k.prefix + "ready:floor" }

// WorkerTypes is the ZSET of job types workers serve, scored by when the
// last announcement of each expires (ms).
func (k Keys) WorkerTypes() string { return k.prefix + "worker-types" }

// Positions is the HASH of the consumers' positions in the retained logs they
// apply to Redis ([Queue.Position]): field "<log>:seq", the stream sequence
// up to which every message was applied, and "<log>:rid", the run id of the
// Redis server that stored it.
func (k Keys) Positions() string { return k.prefix + "positions" }

// Guard is the short-lived key of one position check at the head of a
// pipeline (position.lua's guard, [Queue.EnqueueJobsIfCurrent]); token is
// unique to the check.
func (k Keys) Guard(token string) string { return k.prefix + "guard:" + token }

// CongestionHistory is the capped LIST of system congestion snapshots.
func (k Keys) CongestionHistory() string { return k.prefix + "congestion:history" }

// groupKey is a group's name inside Redis, "<tenant>:<gid>".
func groupKey(g contracts.GroupRef) string { return g.Tenant + ":" + g.ID }

// parseGroupKey reads a group key back ("<tenant>:<gid>").
func parseGroupKey(s string) contracts.GroupRef {
	t, id, _ := strings.Cut(s, ":")
	return contracts.GroupRef{Tenant: t, ID: id}
}

// member is the "<tenant>:<gid>:<jid>" member of the non-ready and inflight ZSETs.
func member(g contracts.GroupRef, jid string) string { return groupKey(g) + ":" + jid }

// GroupCallback is the HASH of a group's completion callback delivery: url,
// state (pending, delivered, failed), id (the webhook id), endedAt, since
// (start of the retry budget), attempts, nextAt, lastAttemptAt, statusCode,
// lastError, deliveredAt, failedAt, body (the frozen body) and lease. It has
// no TTL while pending; an ended delivery keeps it as long as the group's
// meta (GroupTTL).
func (k Keys) GroupCallback(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":callback"
}

// DestRates is the ZSET of the destinations whose rate is learned
// (docs/ARCHITECTURE.md §5), scored by their last report in ms.
func (k Keys) DestRates() string { return k.prefix + "dest-rates" }

// DestRate is the HASH of one destination's learned rate (dest_report.lua).
// Destinations are tokens (no ':'), so no destination's key is another key.
func (k Keys) DestRate(dest string) string { return k.prefix + "dest-rate:" + dest }

// TenantDestinations is the ZSET of a tenant's explicit destinations
// (enqueue.lua), scored by their last use in ms: at most
// [AdaptiveConfig.MaxDestinationsPerTenant] at once.
func (k Keys) TenantDestinations(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":destinations"
}

// CallbacksDue is the ZSET of pending callback deliveries (member: group
// key "<tenant>:<gid>"), scored by when each is due (ms); a leased one by
// when its lease runs out.
func (k Keys) CallbacksDue() string { return k.prefix + "callbacks:due" }

// TenantCallbackSecret is the HASH of a tenant's callback signing secrets:
// current, createdAt, and while a rotation's grace period lasts previous and
// previousUntil (ms).
func (k Keys) TenantCallbackSecret(tenant string) string {
	return k.prefix + "tenant:" + tenant + ":callback-secret"
}

// ShardPrefix is the prefix of logical shard i's keys under the base prefix
// base (docs/ARCHITECTURE.md §11.1): base + "{s<i>}:", a hash tag of its
// own, so that Redis Cluster places each shard on a primary of its own
// choosing. Build a shard's [Keys] with NewKeys(ShardPrefix(base, i)).
func ShardPrefix(base string, i int) string { return base + "{s" + strconv.Itoa(i) + "}:" }

// GlobalPrefix is the prefix of the cross-shard keys under the base prefix
// base: base + "{g}:", one slot for the state every shard owner shares
// (the shard leases among them).
func GlobalPrefix(base string) string { return base + "{g}:" }

// Fence is the STRING of a shard's fence ([ShardLeases.Fence]): the highest
// epoch of a lease on the shard that its taker wrote into the shard, raised
// only; a shard's scripts refuse a call with an older epoch (lib.lua
// fence_ok). Under a shard's prefix ([ShardPrefix]).
func (k Keys) Fence() string { return k.prefix + "fence" }

// ShardLeases is the HASH of the shard leases ([ShardLeases]): field the
// shard number, value "<until ms>:<epoch>:<holder>". A lease whose until
// has passed is free. Under the cross-shard prefix ([GlobalPrefix]).
func (k Keys) ShardLeases() string { return k.prefix + "shard-leases" }

// ShardHolders is the ZSET of the holders that asked for shard leases,
// scored by when their heartbeat expires (ms): the live holders the shards
// are spread over. Under the cross-shard prefix.
func (k Keys) ShardHolders() string { return k.prefix + "shard-holders" }

// ShardEpochs is the HASH shard number → the epoch of the shard's last
// lease taken: raised at every take, never lowered nor reused. Under the
// cross-shard prefix.
func (k Keys) ShardEpochs() string { return k.prefix + "shard-epochs" }

// ShardCount is the STRING of the number of shards the leases were first
// asked for: a holder counting another number is refused. Under the
// cross-shard prefix.
func (k Keys) ShardCount() string { return k.prefix + "shard-count" }

// GrantPool is the HASH of the cross-shard limiter's current period and
// window ([Grants], docs/ARCHITECTURE.md §11.1): period (the number of the
// period allocated), window, net (jobs granted minus returned in the
// window), net:<type> for each limited type, and hist (JSON: the jobs
// granted minus returned in each period of the last window's worth). With
// [NewGrants] the prefix is the cross-shard one, "<prefix>{g}:".
func (k Keys) GrantPool() string { return k.prefix + "grants:pool" }

// GrantShards is the HASH shard → JSON of each shard's last report and
// grant for the cross-shard limiter ([Grants]): the period of its last
// report, its demand per level and per limited type, its grant and the
// grant's period, its credits (the fractions of its shares carried to
// the next period), and its allotment of the period not taken yet.
func (k Keys) GrantShards() string { return k.prefix + "grants:shards" }
