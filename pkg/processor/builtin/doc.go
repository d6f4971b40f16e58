// Package builtin holds the processors the stock bulkaction worker registers: "noop", "sleep" and
// "http". [Register] adds all three to a [processor.Mux].
//
//   - "noop" ([Noop]) succeeds at once; it measures the pipeline itself.
//   - "sleep" ([Sleep]) waits for a while and then fails with configured probabilities; it simulates
//     work and failure for load tests and demos. Payload:
//     {"ms":N, "jitterMs":J, "failRate":F, "rateLimitRate":R, "retryAfterMs":M, "permanentFailRate":P}.
//   - "http" ([HTTP]) calls an HTTP endpoint once per job and maps the status code to an outcome.
//     Payload: {"url":"...", "method":"POST", "headers":{...}, "body":...}.
//
// Every processor here is idempotent as far as the pipeline is concerned; the "http" processor sends
// an Idempotency-Key header ("<groupId>:<jobId>") so that the endpoint can be too, since a job can be
// delivered more than once.
package builtin
