// Package handoff moves leased jobs onto the READY stream (docs/ARCHITECTURE.md §6.2): it
// publishes each job as a [contracts.ReadyBatch] of one on
// <prefix>.ready.<type> with Nats-Msg-Id <tenant>:<groupId>:<jobId>:<attempt>
// ([Publish]), or packs the jobs of each type into messages of up to a
// given number of jobs with a Nats-Msg-Id derived from the members' ids and
// attempts ([PublishPacks]), with the jobs' trace context; it waits for
// every PubAck, and then confirms the published jobs in Redis so their
// leases end. [Room] measures READY's free room per type, in jobs.
//
// A job whose publish fails is not confirmed: its lease expires and the
// dispatcher re-publishes it, so a job is never lost; a re-publish of the
// same pack inside the stream's duplicate window is dropped by JetStream.
// The fetcher (admitted jobs) and the dispatcher (released and reclaimed
// jobs) share this package.
package handoff
