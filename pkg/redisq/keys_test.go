package redisq_test

import (
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestNoUserKeyCollidesWithASystemKey builds every key that takes a tenant,
// group or job id with ids named after the segments of the system keys, and
// checks that none equals a system key, and that no two user keys of
// different tenants, groups or jobs are equal. A group named "global" once
// shared the global rate counter's key and halved the limit for everyone.
func TestNoUserKeyCollidesWithASystemKey(t *testing.T) {
	k := redisq.NewKeys("p:")
	const window = 1234
	system := map[string]string{
		k.VClock(): "VClock", k.NonReadyQueue(): "NonReadyQueue", k.Inflight(): "Inflight",
		k.RateLimitGlobal(window): "RateLimitGlobal", k.RatePacer(): "RatePacer", k.ActiveTenants(): "ActiveTenants",
		k.ActiveSeen(): "ActiveSeen", k.CongestionHistory(): "CongestionHistory", k.WorkerTypes(): "WorkerTypes",
		k.TenantClock(): "TenantClock", k.TenantWeights(): "TenantWeights", k.StuckWatch(): "StuckWatch",
		k.TenantQuotas(): "TenantQuotas", k.QuotaTenants(): "QuotaTenants", k.GroupIndex(): "GroupIndex",
		k.Positions(): "Positions", k.Guard("0123456789abcdef-1"): "Guard", k.CallbacksDue(): "CallbacksDue",
		k.TenantSettingsRev(): "TenantSettingsRev", k.TenantWindows(): "TenantWindows",
		k.Fence(): "Fence", k.ShardLeases(): "ShardLeases", k.ShardHolders(): "ShardHolders",
		k.ShardEpochs(): "ShardEpochs", k.ShardCount(): "ShardCount",
		k.GrantPool(): "GrantPool", k.GrantShards(): "GrantShards",
	}
	for _, l := range contracts.Priorities {
		system[k.FairQueue(l)] = "FairQueue"
	}
	ids := []string{"global", "pacer", "vclock", "seen", "history", "group", "groups", "tenant", "tenants",
		"rate-limit", "fair-queue", "inflight", "non-ready-queue", "non-ready-count", "active-groups",
		"active-tenants", "tenant-weights", "tenant-clock", "stuck-watch", "worker-types", "congestion",
		"high", "normal", "low", "1234", "meta", "jobs", "ids", "progress", "stats", "job", "p", "refusals", "refused-ids", "refused-recent",
		"tenant-quotas", "quota-tenants", "queued-jobs", "queued", "quota", "quotas", "group-index", "index",
		"retry-of", "retries", "idempotency", "admin", "positions", "guard", "callback", "callbacks", "due",
		"callback-secret", "tenant-settings-rev", "tenant-windows", "fence", "shard-leases", "shard-holders",
		"shard-epochs", "shard-count", "shard"}
	owner := map[string]string{} // user key -> what built it
	add := func(key, what string) {
		if sys, ok := system[key]; ok {
			t.Errorf("%s = %q, the key of %s", what, key, sys)
		}
		if o, ok := owner[key]; ok && o != what {
			t.Errorf("%s = %q, the key of %s", what, key, o)
		}
		owner[key] = what
	}
	for _, typ := range ids { // job types are named by users too
		add(k.RateLimitType(typ, window), "RateLimitType("+typ+")")
		add(k.RateTypePacer(typ), "RateTypePacer("+typ+")")
	}
	for _, tenant := range ids {
		add(k.RateLimitTenant(tenant, window), "RateLimitTenant("+tenant+")")
		add(k.TenantNonReady(tenant), "TenantNonReady("+tenant+")")
		add(k.TenantActiveGroups(tenant), "TenantActiveGroups("+tenant+")")
		add(k.TenantQueuedJobs(tenant), "TenantQueuedJobs("+tenant+")")
		add(k.TenantGroupIndex(tenant), "TenantGroupIndex("+tenant+")")
		add(k.TenantCallbackSecret(tenant), "TenantCallbackSecret("+tenant+")")
		for _, h := range ids {
			add(k.Idempotency("t:"+tenant, h), "Idempotency(t:"+tenant+","+h+")")
		}
		for _, l := range contracts.Priorities {
			add(k.TenantGroups(tenant, l), "TenantGroups("+tenant+","+string(l)+")")
		}
		for _, gid := range ids {
			g := contracts.GroupRef{Tenant: tenant, ID: gid}
			add(k.GroupJobs(g), "GroupJobs("+g.String()+")")
			add(k.GroupMeta(g), "GroupMeta("+g.String()+")")
			add(k.GroupIDs(g), "GroupIDs("+g.String()+")")
			add(k.GroupQueued(g), "GroupQueued("+g.String()+")")
			add(k.GroupProgress(g), "GroupProgress("+g.String()+")")
			add(k.CongestionCount(g), "CongestionCount("+g.String()+")")
			add(k.CongestionStats(g), "CongestionStats("+g.String()+")")
			add(k.GroupRetryOf(g), "GroupRetryOf("+g.String()+")")
			add(k.GroupRetries(g), "GroupRetries("+g.String()+")")
			add(k.GroupRefusals(g), "GroupRefusals("+g.String()+")")
			add(k.GroupRefusedIDs(g), "GroupRefusedIDs("+g.String()+")")
			add(k.GroupRefusedRecent(g), "GroupRefusedRecent("+g.String()+")")
			add(k.GroupCallback(g), "GroupCallback("+g.String()+")")
			for _, jid := range ids {
				add(k.Job(g, jid), "Job("+g.String()+","+jid+")")
			}
		}
	}
}
