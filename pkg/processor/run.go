package processor

import (
	"context"
	"fmt"
	"runtime/debug"
)

// Run calls p.Process(ctx, job) and returns its error, recovering a panic into a [*PanicError] that
// carries the panic value and the stack of the panicking goroutine. The worker runs every job through
// Run, so a panicking processor fails its job (permanently, see [Classify]) and the worker keeps
// running. A nil p returns a permanent error wrapping [ErrNoProcessor].
func Run(ctx context.Context, p Processor, job *Job) (err error) {
	if p == nil {
		return Permanent(fmt.Errorf("%w: nil processor", ErrNoProcessor))
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return p.Process(ctx, job)
}

// Recover returns a [Middleware] that recovers a panic in the processors it wraps into a
// [*PanicError], exactly as [Run] does. Add it with [Mux.Use] (first, so it also covers the other
// middlewares) when calling a Mux without Run.
func Recover() Middleware {
	return func(next Processor) Processor {
		return ProcessorFunc(func(ctx context.Context, job *Job) error {
			return Run(ctx, next, job)
		})
	}
}
