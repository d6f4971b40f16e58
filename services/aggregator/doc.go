// Package aggregator is the bulkaction aggregator service: it counts job
// results into their groups exactly once and publishes group completions.
//
// An [Aggregator] reads <prefix>.result.> through one durable pull consumer
// (shared by every aggregator instance) in batches, and for each batch
// (docs/ARCHITECTURE.md §6.4):
//
//  1. decodes every result; a message that is not a valid result, or whose
//     group differs from its subject's, goes to the dead-letter stream and is
//     terminated;
//  2. records the batch in Redis in one round trip
//     ([redisq.Queue.RecordBatch]). A job is counted only if it is not yet
//     terminal, so a redelivered or re-published result changes nothing; the
//     result that completes a sealed group moves it to COMPLETED, and the
//     record script cleans up (the group leaves the active set, its
//     congestion keys are dropped, its keys get their TTLs);
//  3. publishes a COMPLETED event for each group the batch completed, and
//     publishes again the event of a terminal group that received a
//     duplicate result (the event's message id makes this harmless; it
//     covers a crash between recording and publishing);
//  4. acknowledges the messages, only then. If Redis fails, the batch is
//     handed back for redelivery and nothing is acknowledged; if an event
//     cannot be published, the messages of that group are handed back.
//
// A result for a job Redis does not know (never enqueued, or its hash
// expired) is acknowledged and counted as dropped.
//
// # Stuck groups
//
// Every Config.StuckCheckEvery the aggregator looks for groups that are
// RUNNING or AGGREGATING and have made no progress for Config.StuckAfter
// ([redisq.Queue.StuckGroups]) and logs a warning for each, at most once per
// group per StuckAfter. [Aggregator.Stuck] returns them on demand.
package aggregator
