// Package redisq holds all of bulkaction's Redis state: the fair queue, the
// rate limiter and admission, the non-ready (backoff) queue with congestion
// control, leases, and exact group accounting.
//
// Every state change is one Lua script (lua/*.lua, embedded), so any number
// of fetchers, dispatchers, workers and aggregators may share one Redis.
// Keys are built by [Keys] (docs/ARCHITECTURE.md §3); the prefix may carry a hash tag.
//
// # Fair queue
//
// The fair queue has two levels (docs/ARCHITECTURE.md §4). Within each
// priority level (high, normal, low, served strictly in that order) the
// tenants wait in one ZSET scored by their virtual time: the tenant with the
// smallest goes first, and serving one of its jobs adds 1/weight to it
// ([Queue.SetTenantWeight]; weighted round robin). A tenant that becomes
// non-empty enters at the level's virtual time (that of the tenant served
// last), so it gets no credit for the time it was away. Within the tenant,
// its groups wait in a ZSET of their own, scored
//
//	vt + basePriority + ALPHA * doneJobs / max(1, totalJobs - doneJobs)
//
// where vt is a virtual clock: Redis TIME, advanced by a microsecond at every
// use so that groups touched in the same millisecond still get distinct,
// increasing scores. A group is scored when it becomes non-empty (ZADD NX)
// and again each time one of its jobs is served, so equal groups alternate.
// ALPHA > 0 pushes well-progressed groups back; ALPHA < 0 favours nearly-done
// groups; 0 is round robin by age. So a tenant that splits its work into
// many groups gets the share of one tenant, and its groups share it.
//
// A paused group ([Queue.Pause]) and a group at its in-flight limit
// (maxInFlight) leave their tenant's ZSET keeping their score, and go back
// with it when resumed or when a slot frees: they keep their place.
//
// # Admission
//
// [Queue.Admit] takes up to N jobs (the caller's free READY capacity) in fair
// order through the rate gate of the configured mode, and leases them: each
// job moves to the inflight set with attempt+1 until [Queue.Confirm]. Rate
// shares are per tenant: an active tenant's share of the window is
// max(1, floor(global / active tenants)) * its weight. In [ModeSeed] a fixed
// window counts admissions globally and per tenant, and a denied job is
// parked in the non-ready queue with the congestion-aware backoff
// base + floor(nonReadyCount / share) seconds; one call moves at most N jobs,
// parked ones included. In [ModePaced] (the default) a tenant whose share of
// the window is used up is skipped and keeps its place, capacity no waiting
// tenant can use goes to the others (never beyond the global limit), and a
// GCRA pacer spreads admissions over the window, so no sliding window sees
// more than limit * (1 + Burst/Window) jobs. A group's admitted but
// unfinished jobs never exceed its maxInFlight (0 = no limit).
//
// [WithTypeRooms] limits a call to the READY room of each job type: a group
// whose next job's type has no room keeps its place and is passed by, so a
// type with slow or absent workers never stalls the others.
//
// [Queue.Release] moves due jobs out of the non-ready queue under a lease,
// through the same global gate (the pacer, or the fixed window's room);
// [Queue.Reclaim] re-leases jobs whose admission lease expired. A job of a
// paused group (or, for Release, of a group at its in-flight limit) goes
// back into its group's queue instead. [Queue.Claim], [Queue.Retry] and
// [Queue.Record] are the worker's and aggregator's side of the reliability
// protocol: a delivery runs only if it carries the current attempt, and a
// result is counted exactly once.
//
// # Groups
//
// A group is named by its tenant and groupId ([contracts.GroupRef]); two
// tenants may use the same groupId without touching each other. A job id
// is accepted once for the whole life of its group: a re-sent job is a
// duplicate even after its job hash expired.
//
// # Tenant quotas
//
// A tenant may have at most a number of queued jobs (accepted and not
// terminal, in its groups that have not ended) and of active groups (that
// exist and have not ended): [Config.TenantMaxQueuedJobs] and
// [Config.TenantMaxActiveGroups] by default, a tenant's own limits set with
// [Queue.SetTenantQuota]. The scripts keep both counts exactly; enqueue
// accepts or refuses each unit's new jobs ([Job.Message]: a jobs message)
// as a whole ([RejectedQueuedJobsQuota], [RejectedActiveGroupsQuota],
// [EnqueueResult.Refusals]); [Queue.CorrectCounters] re-derives the counts.
//
// # Logical shards
//
// With [Config.Shards] N above 1 the tenants are spread over N logical
// shards ([ShardOf]), each with keys of its own hash tag ([ShardPrefix]),
// so that a Redis Cluster places them on its primaries. The Queue routes
// every call to its tenant's shard ([Queue.For]), splits batches of
// several tenants by shard, and runs calls that span tenants on every
// shard, merging their answers (docs/ARCHITECTURE.md §11.1). Admission
// takes [WithShardTurns] to admit from the shards its caller holds, each
// within its grant and with its lease epoch (at once when the turns fit
// together within the call's room); with shards, [Queue.Release] hands due
// jobs back to their groups, to be admitted within the grants too;
// [Queue.ShardDemand],
// [Queue.NewShardLeases] and [Queue.NewGrants] give a shard owner what it
// needs.
//
// # Shard leases
//
// [ShardLeases] spreads a fixed number of logical shards (docs/ARCHITECTURE.md
// §11.1; keys under [ShardPrefix]) evenly over the holders that call
// [ShardLeases.Hold], under leases kept in the cross-shard keys
// ([GlobalPrefix]). Every take of a shard gets a higher epoch, which its
// taker writes into the shard as its fence ([ShardLeases.Fence], raised
// only); a shard's scripts refuse a call whose epoch is below the fence
// (lib.lua fence_ok; admit.lua checks it), so a holder that lost its lease
// changes nothing. The fetchers hold the shards they admit from by them.
//
// # Cross-shard grants
//
// [Grants] splits the global limit, the per-type limits and the learned
// destination rates ([Demand.Limits], [Queue.GrantedLimits]) between the
// owners of the logical shards of a Redis Cluster installation
// (docs/ARCHITECTURE.md §11.1; the fetchers report for the shards they
// hold and admit at their grants): each owner
// reports its demand per level and per limited type every period
// ([Grants.Report]) and gets its grant for the period, levels served
// strictly and shares in proportion to demand, within the limit in every
// aligned window, and its part of the demand ([Grant.Share]), by which
// it takes its part of what the grants do not split (READY's room). A
// turn spends a type's grant through [ShardTurn.TypeMax].
package redisq
