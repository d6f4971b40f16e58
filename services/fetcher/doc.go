// Package fetcher is the bulkaction fetcher target: it moves submissions
// from the SUBMIT stream into the Redis fair queue (ingest) and admits
// queued jobs, fairly and at the configured rate, onto the READY stream
// (admit), pausing while READY holds its capacity (docs/ARCHITECTURE.md §1, §5, §6).
//
// Ingest reads <prefix>.submit.> through one durable pull consumer that any
// number of fetchers share. Each batch is decoded and validated; an invalid
// message is published to <prefix>.dlq.<tenant>.<reason> and terminated. The jobs of
// a batch go to Redis in one call (an existing job is a no-op), seals and
// cancels are applied in message order, and only then are the messages
// acknowledged: a message whose state did not reach Redis is negatively
// acknowledged with a delay and comes back. Jobs that arrive for a sealed
// group that already has its total go to the DLQ with reason "over_total",
// jobs of a cancelled or completed group with "group_ended", a jobs message
// whose new jobs would take its tenant beyond a tenant quota (most queued
// jobs, most active groups) with "over_quota" (none of its new jobs is
// stored), and a seal that contradicts an earlier one or the jobs already
// received with "bad_seal". Every enqueue wakes idle fetchers through the core NATS
// subject <prefix>.notify.work.
//
// Admit leases up to min(free READY capacity, AdmitBatchSize) jobs per
// round through [redisq.Queue.Admit], publishes them to READY, and confirms
// them. A fetcher that dies between the two leaves its leases to expire;
// the dispatcher re-publishes them. Jobs of a type whose rate limit
// (redisq.Config.TypeLimits) is used up stay queued, their groups keeping
// their place; when only such jobs wait, the loop sleeps until the first of
// their types has rate again, or until new work is announced. Group state
// changes seen on the way
// (CREATED, RUNNING, AGGREGATING, COMPLETED, CANCELLED) are published as
// group events.
package fetcher
