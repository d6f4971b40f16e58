package redisq_test

import (
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestNoUserKeyCollidesWithASystemKey builds every key that takes a group
// or job id with ids named after the segments of the system keys, and
// checks that none equals a system key. A group named "global" once shared
// the global rate counter's key and halved the limit for everyone.
func TestNoUserKeyCollidesWithASystemKey(t *testing.T) {
	k := redisq.NewKeys("p:")
	const window = 1234
	system := map[string]string{
		k.VClock(): "VClock", k.NonReadyQueue(): "NonReadyQueue", k.Inflight(): "Inflight",
		k.RateLimitGlobal(window): "RateLimitGlobal", k.RatePacer(): "RatePacer", k.ActiveGroups(): "ActiveGroups",
		k.ActiveSeen(): "ActiveSeen", k.CongestionHistory(): "CongestionHistory", k.WorkerTypes(): "WorkerTypes",
	}
	for _, l := range []contracts.Priority{contracts.PriorityHigh, contracts.PriorityNormal, contracts.PriorityLow} {
		system[k.FairQueue(l)] = "FairQueue"
	}
	ids := []string{"global", "pacer", "vclock", "seen", "history", "group", "rate-limit", "fair-queue", "inflight",
		"non-ready-queue", "active-groups", "congestion", "high", "normal", "low", "1234", "meta", "jobs", "stats"}
	for _, gid := range ids {
		user := map[string]string{
			k.GroupJobs(gid): "GroupJobs", k.GroupMeta(gid): "GroupMeta",
			k.RateLimitGroup(gid, window): "RateLimitGroup", k.CongestionCount(gid): "CongestionCount",
			k.CongestionStats(gid): "CongestionStats",
		}
		for _, jid := range ids {
			user[k.Job(gid, jid)] = "Job"
		}
		for key, builder := range user {
			if sys, ok := system[key]; ok {
				t.Errorf("%s(%q) = %q, the key of %s", builder, gid, key, sys)
			}
		}
	}
}
