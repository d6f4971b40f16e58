package processor

import (
	"context"
	"encoding/json"
	"fmt"
)

// Job is one unit of work handed to a [Processor]: a READY message of the pipeline.
//
// The zero value is a job of no group, no id and no type with an empty payload; the worker always
// fills every field. A processor must not keep the Job or its Payload after Process returns.
type Job struct {
	// Tenant is the tenant the job's group belongs to.
	Tenant string `json:"tenant"`
	// GroupID is the id of the group (bulk action) the job belongs to.
	GroupID string `json:"groupId"`
	// JobID is the id of the job, unique within its group.
	JobID string `json:"jobId"`
	// Type is the job type the job was routed by, as registered with [Mux.Handle].
	Type string `json:"type"`
	// Payload is the job's JSON payload exactly as submitted; empty when none was submitted.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Attempt is the 1-based attempt number: 1 for the first run, 2 for the first retry, and so on.
	// Zero means the job did not come from the pipeline (for example a test); treat it as 1.
	Attempt int `json:"attempt"`
}

// IdempotencyKey returns "<tenant>:<groupId>:<jobId>", the key that is the same for every run and
// every attempt of the job. Pass it to downstream systems that deduplicate requests.
func (j *Job) IdempotencyKey() string {
	return j.Tenant + ":" + j.GroupID + ":" + j.JobID
}

// UnmarshalPayload decodes the job's JSON payload into v. A payload that is not valid JSON for v is
// an error retrying cannot fix, so the returned error is already marked [Permanent]; a processor can
// return it as is. An empty payload decodes like JSON null (v is left unchanged).
func (j *Job) UnmarshalPayload(v any) error {
	if len(j.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return Permanent(fmt.Errorf("processor: job %s type %q: invalid payload: %w", j.IdempotencyKey(), j.Type, err))
	}
	return nil
}

// Processor runs jobs of one or more types. Process runs the job and reports how it went: nil for
// success, a plain error to retry with backoff, an error from [RateLimited] to retry after a given
// duration, or an error from [Permanent] to fail without retrying (see the package documentation).
//
// Process must honour ctx, which is cancelled when the job timeout expires or the worker shuts down,
// and must be idempotent: a job can run more than once. Process is called from many goroutines at
// once.
type Processor interface {
	Process(ctx context.Context, job *Job) error
}

// ProcessorFunc adapts an ordinary function to a [Processor], like [net/http.HandlerFunc]. A nil
// ProcessorFunc is not a valid processor: [Mux.Handle] rejects it.
type ProcessorFunc func(ctx context.Context, job *Job) error

// Process calls f(ctx, job).
func (f ProcessorFunc) Process(ctx context.Context, job *Job) error {
	return f(ctx, job)
}

// Middleware wraps a [Processor] with behaviour that runs around it (recovery, tracing, metrics,
// logging). It is called once, when a [Mux] builds its chain, and must return a non-nil Processor.
type Middleware func(Processor) Processor

// Chain composes middlewares into one: Chain(a, b)(p) is a(b(p)), so a runs first and b runs
// closest to p. Chain() with no middlewares returns p unchanged. It panics on a nil middleware.
func Chain(mws ...Middleware) Middleware {
	for _, mw := range mws {
		if mw == nil {
			panic("processor: nil middleware")
		}
	}
	return func(p Processor) Processor {
		for i := len(mws) - 1; i >= 0; i-- {
			p = mws[i](p)
			if p == nil {
				panic("processor: middleware returned a nil processor")
			}
		}
		return p
	}
}
