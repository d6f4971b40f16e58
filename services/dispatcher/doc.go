// Package dispatcher is the bulkaction dispatcher target (docs/ARCHITECTURE.md §5, §6):
// it moves due jobs from the Redis non-ready (backoff) queue to the READY
// stream, re-publishes jobs whose admission lease expired (a fetcher or
// dispatcher died between lease and hand-over), and keeps the congestion
// bookkeeping honest (periodic counter correction and congestion
// snapshots).
//
// Releases respect the same READY capacity as the fetcher. A released job
// carries attempt+1; a reclaimed job keeps its attempt, so its re-publish
// carries the same Nats-Msg-Id and JetStream drops it when the first
// publish did arrive within the duplicate window (outside it, the worker's
// claim check drops the stale delivery). Any number of dispatchers may run
// at once: every step is one atomic Redis script.
package dispatcher
