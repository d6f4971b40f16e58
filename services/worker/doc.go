// Package worker is the bulkaction worker service: it runs admitted jobs with
// the processors of a [processor.Mux] and publishes their results.
//
// A [Worker] keeps one durable pull consumer per job type on the READY
// subject of that type (<prefix>.ready.<type>); any number of worker
// instances share these consumers. Across all its types a worker runs at
// most Config.Concurrency jobs at once and never pulls a message it has no
// free slot for.
//
// Each delivery follows the worker's side of the reliability protocol
// (docs/ARCHITECTURE.md §6.3):
//
//  1. The body is decoded; a message that is not a valid ready job, or whose
//     type differs from its subject's, goes to the dead-letter stream and is
//     terminated.
//  2. The job is claimed in Redis; the deliveries of one pull are claimed
//     together, in one call ([redisq.Queue.ClaimBatch]). A delivery that
//     does not carry the job's current attempt is stale and is acknowledged
//     without running; so is a job of a cancelled group (it is counted as
//     cancelled). A job claimed again while still RUNNING as its attempt,
//     without having been handed back (its worker stopped while it ran),
//     is a suspect: it runs alone in the worker, and one whose worker
//     stopped during Config.MaxDeliveries such runs (a poison job) becomes
//     a FAILED result without running ([redisq.Queue.SoloRun]). The worker
//     marks the jobs it hands back on purpose ([redisq.Queue.HandBack]).
//  3. The processor runs under Config.JobTimeout, through [processor.Run]
//     (a panic fails the job; the worker keeps running). Every
//     Config.AckWait/3 one ticker tells JetStream that the messages of all
//     running jobs are in progress, so a long job is not delivered again.
//  4. [processor.Classify] decides the outcome. Success and permanent
//     failure publish a SUCCESS or FAILED result; a retryable error or a
//     rate limit sends the job back to the non-ready queue with
//     congestion-aware backoff (a Retry-After wins), until the attempts are
//     used up (Config.MaxRetryCount retries), when it publishes FAILED.
//  5. The READY message is acknowledged only after the result's PubAck (or
//     after the job was parked in Redis). If the result cannot be published
//     the message is negatively acknowledged: it is delivered again, the same
//     attempt runs again, and the aggregator still counts it once.
//
// Processors therefore run at least once and must be idempotent (see
// package processor).
//
// # Process isolation
//
// With Config.Isolation [IsolationProcess] processors run in executor
// child processes, one job at a time in each: the program started again
// with [ExecutorEnv] set, which must call [ServeExecutor] with the same
// processors before anything else (pkg/server does). A processor that
// crashes its process takes down its executor and its own job, not the
// worker nor the jobs beside it: the job runs again at once, and one whose
// executor exits in Config.MaxDeliveries further runs becomes a FAILED
// result (docs/ARCHITECTURE.md §6.3).
package worker
