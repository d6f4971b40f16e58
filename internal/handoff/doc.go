// Package handoff moves leased jobs onto the READY stream (docs/ARCHITECTURE.md §6.2)
// and measures READY's room for them.
//
// Publishing ([Publish], publish.go): the jobs of each type are packed
// into [contracts.ReadyBatch] messages of up to a given number of jobs
// ([Packing], pack.go) on <prefix>.ready.<type>, with a Nats-Msg-Id
// derived from the members' ids and attempts (a pack of one has the job's
// <tenant>:<groupId>:<jobId>:<attempt>) and the jobs' trace context
// (trace.go); it waits for every PubAck, and then confirms the published
// jobs in Redis so their leases end. A job whose publish fails is not
// confirmed: its lease expires and the dispatcher re-publishes it, so a job
// is never lost; a re-publish of the same pack inside the stream's
// duplicate window is dropped by JetStream.
//
// READY's room ([Room], room.go): READY's free room per job type, in jobs,
// the backpressure of admission and release.
//
// The fetcher (admitted jobs) and the dispatcher (released and reclaimed
// jobs) share this package.
package handoff
