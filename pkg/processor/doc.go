// Package processor is the worker SDK of bulkaction: the interface a job type's code implements, a Mux
// that routes jobs by type, middleware, and the errors that tell the worker what to do next.
//
// It is shaped like net/http: a [Processor] is the [net/http.Handler] of a job, [ProcessorFunc] is its
// HandlerFunc, and a [Mux] is the ServeMux, keyed by job type instead of path:
//
//	mux := processor.NewMux()
//	mux.Use(processor.Recover())
//	mux.HandleFunc("email", func(ctx context.Context, job *processor.Job) error {
//		var p struct{ To string }
//		if err := job.UnmarshalPayload(&p); err != nil {
//			return err // already permanent: retrying cannot fix a bad payload
//		}
//		return send(ctx, job.IdempotencyKey(), p.To)
//	})
//
// The stock worker consumes the READY subject of every type in [Mux.Types], calls [Run] for each job
// under the job timeout, and maps the returned error to an outcome with [Classify].
//
// # At-least-once execution
//
// Execution is at least once: a processor can run more than once for the same job, and even for the
// same attempt. A worker can crash after the work is done but before the result is recorded, a lease
// can expire and the job be re-published, and a retry runs the job again after an earlier attempt
// may have had partial effects. Processors must therefore be idempotent. [Job.IdempotencyKey]
// ("<groupId>:<jobId>") is the same for every run and every attempt of a job; pass it to downstream
// systems that deduplicate (the built-in "http" processor sends it as the Idempotency-Key header).
// Results are counted exactly once however many times a processor runs.
//
// # Errors and outcomes
//
// What a processor returns decides what happens to the job ([Classify] is the mapping):
//
//   - nil: the job succeeded ([OutcomeSuccess]).
//   - A plain error, including [context.DeadlineExceeded] when the job timeout expires: the job is
//     retried later with the worker's congestion-aware backoff ([OutcomeRetry]). A job whose
//     context is cancelled because the worker's shutdown grace ran out is not backed off: its
//     message is handed back and the same attempt runs again on another delivery.
//   - An error made by [RateLimited] (a [*RateLimitError] anywhere in the chain): the job is retried
//     after its RetryAfter duration; zero means the worker's backoff ([OutcomeRateLimited]). Use it
//     when a downstream system answers 429 or asks to slow down.
//   - An error made by [Permanent], or one that wraps [ErrSkipRetry]: the job fails now, without
//     retries ([OutcomeFailed]). Use it for errors that a retry cannot fix, such as an invalid payload.
//     A recovered panic ([*PanicError]) and a job type without a processor ([ErrNoProcessor]) fail
//     the same way. Permanent wins over every other mark in the chain.
//
// Retries, whether after a plain error or a rate limit, are capped by the worker's maxRetryCount
// (default 3): once the cap is reached, a job that still does not succeed is recorded as FAILED.
// [Job.Attempt] tells a processor which attempt it is running (1 for the first).
//
// # Panics
//
// [Run] recovers a panic in a processor into a [*PanicError] carrying the panic value and the stack,
// so one bad job cannot bring a worker down; [Recover] is the same recovery as a [Middleware] for
// code that calls processors without Run.
package processor
