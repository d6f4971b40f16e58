package processor

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrSkipRetry marks an error as permanent: a processor that returns it, or an error wrapping it
// (fmt.Errorf("...: %w", processor.ErrSkipRetry)), fails the job at once without retrying, like
// asynq's SkipRetry. [Permanent] wraps an existing error so that it matches ErrSkipRetry.
var ErrSkipRetry = errors.New("processor: skip retry")

// ErrNoProcessor is returned (wrapped with the job type and marked [Permanent]) by [Mux.Process]
// for a job whose type has no registered processor.
var ErrNoProcessor = errors.New("processor: no processor for job type")

// Permanent marks err as permanent: the job fails without retrying. The result matches
// errors.Is(x, ErrSkipRetry), its message is err's message, and errors.Unwrap returns err, so
// errors.Is and errors.As still see everything err wraps. Permanent(nil) returns nil, so
// `return processor.Permanent(f())` succeeds when f does.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrSkipRetry }

// RateLimited returns a [*RateLimitError]: the job is retried after retryAfter instead of the
// worker's own backoff. Use it when a downstream system answers 429 or otherwise asks to slow down.
// A zero or negative retryAfter means "no preference": the worker's congestion-aware backoff decides.
// err is the cause and may be nil.
func RateLimited(retryAfter time.Duration, err error) error {
	return &RateLimitError{RetryAfter: retryAfter, Err: err}
}

// RateLimitError reports that a job was rate limited and should be retried after RetryAfter. Create
// it with [RateLimited]; find it in a chain with errors.As.
//
// The zero value means rate limited with no retry-after preference and no cause.
type RateLimitError struct {
	// RetryAfter is how long to wait before the next attempt. Zero or negative leaves the delay to
	// the worker's congestion-aware backoff.
	RetryAfter time.Duration
	// Err is the cause; nil when there is none.
	Err error
}

// Error returns "rate limited (retry after <RetryAfter>): <Err>", omitting the parts that are unset.
// A nil *RateLimitError returns "rate limited".
func (e *RateLimitError) Error() string {
	msg := "rate limited"
	if e == nil {
		return msg
	}
	if e.RetryAfter > 0 {
		msg += " (retry after " + e.RetryAfter.String() + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause, Err (nil for a nil *RateLimitError).
func (e *RateLimitError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// PanicError is a panic recovered from a processor by [Run] or [Recover]. A job that panics fails
// permanently: it would most likely panic again.
//
// The zero value describes a panic with a nil value and no stack.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack trace at the time of the panic, as from runtime/debug.Stack.
	Stack []byte
}

// Error returns "processor panic: <Value>".
func (e *PanicError) Error() string {
	return fmt.Sprintf("processor panic: %v", e.Value)
}

// Unwrap returns Value if it is an error (panic(err)), nil otherwise.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Outcome is what the worker does with a job after its processor returns; see [Classify].
//
// The zero value is not a valid outcome; it prints as "Outcome(0)".
type Outcome int

// The outcomes of a processor run.
const (
	// OutcomeSuccess: the job succeeded.
	OutcomeSuccess Outcome = iota + 1
	// OutcomeRetry: the job is retried with the worker's congestion-aware backoff.
	OutcomeRetry
	// OutcomeRateLimited: the job is retried after the duration Classify returns (the worker's
	// backoff when it is zero).
	OutcomeRateLimited
	// OutcomeFailed: the job failed permanently and is not retried.
	OutcomeFailed
)

// String returns "success", "retry", "rate_limited" or "failed" (usable as a metric label), and
// "Outcome(<n>)" for any other value.
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeRetry:
		return "retry"
	case OutcomeRateLimited:
		return "rate_limited"
	case OutcomeFailed:
		return "failed"
	default:
		return "Outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// Classify maps a processor's error to the outcome of the job and, for [OutcomeRateLimited], the
// delay before the next attempt (zero otherwise, and zero when the processor expressed no preference):
//
//   - nil: OutcomeSuccess.
//   - an error matching [ErrSkipRetry] (from [Permanent]), a [*PanicError] or [ErrNoProcessor]
//     anywhere in the chain: OutcomeFailed. This wins over a [*RateLimitError] in the same chain.
//   - a [*RateLimitError] anywhere in the chain: OutcomeRateLimited and its RetryAfter (negative
//     values become zero).
//   - anything else, including [context.DeadlineExceeded] (the job timeout) and [context.Canceled]:
//     OutcomeRetry.
//
// The worker caps retries at its maxRetryCount; Classify knows nothing of attempts.
func Classify(err error) (Outcome, time.Duration) {
	if err == nil {
		return OutcomeSuccess, 0
	}
	var pe *PanicError
	if errors.Is(err, ErrSkipRetry) || errors.Is(err, ErrNoProcessor) || errors.As(err, &pe) {
		return OutcomeFailed, 0
	}
	var rl *RateLimitError
	if errors.As(err, &rl) {
		if rl == nil { // a nil *RateLimitError returned as an error
			return OutcomeRateLimited, 0
		}
		return OutcomeRateLimited, max(rl.RetryAfter, 0)
	}
	return OutcomeRetry, 0
}
