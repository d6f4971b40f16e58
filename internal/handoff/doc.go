// Package handoff moves leased jobs onto the READY stream (docs/ARCHITECTURE.md §6.2): it
// publishes one [contracts.ReadyJob] per job to <prefix>.ready.<type> with
// Nats-Msg-Id <groupId>:<jobId>:<attempt> and the job's trace context,
// waits for every PubAck, and then confirms the published jobs in Redis so
// their leases end.
//
// A job whose publish fails is not confirmed: its lease expires and the
// dispatcher re-publishes it with the same message id, so a job is never
// lost, and a re-publish inside the stream's duplicate window is dropped by
// JetStream. The fetcher (admitted jobs) and the dispatcher (released and
// reclaimed jobs) share this package.
package handoff
