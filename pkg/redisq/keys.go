package redisq

import (
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "bulk-action:"

// Keys builds every Redis key of the system (docs/ARCHITECTURE.md §3). Scripts that must
// build a key of a group they discover receive the prefix and build it the
// same way; the tests check both agree. No key built from a group or job
// id can equal a system key, whatever the id (a test checks it).
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

// FairQueue is the ZSET of groups waiting at one priority level.
func (k Keys) FairQueue(level contracts.Priority) string {
	return k.prefix + "fair-queue:" + string(level)
}

// FairQueues are the three level ZSETs in serving order.
func (k Keys) FairQueues() []string {
	return []string{k.FairQueue(contracts.PriorityHigh), k.FairQueue(contracts.PriorityNormal), k.FairQueue(contracts.PriorityLow)}
}

// VClock is the fair queue's virtual clock: a strictly increasing time that
// orders groups served within the same millisecond.
func (k Keys) VClock() string { return k.prefix + "fair-queue:vclock" }

// GroupJobs is the LIST of a group's queued job ids.
func (k Keys) GroupJobs(gid string) string { return k.prefix + "group:" + gid + ":jobs" }

// GroupMeta is the HASH of a group's counters and state.
func (k Keys) GroupMeta(gid string) string { return k.prefix + "group:" + gid + ":meta" }

// Job is the HASH of one job.
func (k Keys) Job(gid, jid string) string { return k.prefix + "job:" + gid + ":" + jid }

// NonReadyQueue is the ZSET of backed-off jobs, scored by due time (ms).
func (k Keys) NonReadyQueue() string { return k.prefix + "non-ready-queue" }

// Inflight is the ZSET of leased jobs, scored by lease deadline (ms).
func (k Keys) Inflight() string { return k.prefix + "inflight" }

// RateLimitGroup is a group's fixed-window counter. Its "group:" segment
// keeps it apart from the system's rate keys whatever the group is named.
func (k Keys) RateLimitGroup(gid string, window int64) string {
	return k.prefix + "rate-limit:group:" + gid + ":" + strconv.FormatInt(window, 10)
}

// RateLimitGlobal is the global fixed-window counter.
func (k Keys) RateLimitGlobal(window int64) string {
	return k.prefix + "rate-limit:global:" + strconv.FormatInt(window, 10)
}

// RatePacer holds the global pacer's theoretical arrival time (paced mode).
func (k Keys) RatePacer() string { return k.prefix + "rate-limit:pacer" }

// ActiveGroups is the SET of groups sharing the global rate.
func (k Keys) ActiveGroups() string { return k.prefix + "active-groups" }

// ActiveSeen scores each active group by when it last asked for capacity,
// so stale groups can leave the active set.
func (k Keys) ActiveSeen() string { return k.prefix + "active-groups:seen" }

// CongestionCount is a group's count of jobs in the non-ready queue.
func (k Keys) CongestionCount(gid string) string {
	return k.prefix + "congestion:" + gid + ":non-ready-count"
}

// CongestionStats is a group's congestion statistics HASH.
func (k Keys) CongestionStats(gid string) string { return k.prefix + "congestion:" + gid + ":stats" }

// WorkerTypes is the ZSET of job types workers serve, scored by when the
// last announcement of each expires (ms).
func (k Keys) WorkerTypes() string { return k.prefix + "worker-types" }

// CongestionHistory is the capped LIST of system congestion snapshots.
func (k Keys) CongestionHistory() string { return k.prefix + "congestion:history" }

// member is the "<gid>:<jid>" member of the non-ready and inflight ZSETs.
func member(gid, jid string) string { return gid + ":" + jid }
