package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkaction/bulkaction/pkg/client"
)

// DefaultChunk is how many jobs SubmitFile publishes per call when its
// chunk argument is 0 or less.
const DefaultChunk = 500

// PartialError reports a submission that stopped part-way: some jobs are
// stored, the group is not sealed (or, when Stored equals Total, every job is
// stored and only the seal failed). Submitting the same jobs again is safe:
// stored jobs are recognised by their ids. The zero value reports nothing
// stored of nothing.
type PartialError struct {
	// Stored counts the jobs known to be stored.
	Stored int
	// Total is the number of jobs of the submission.
	Total int
	// Err is the cause.
	Err error
}

// Error says how far the submission got and that repeating it is safe.
func (e *PartialError) Error() string {
	if e.Stored == e.Total {
		return fmt.Sprintf("all %d jobs are stored but sealing the group failed: %v; "+
			"re-running the same command is safe (stored jobs are recognised by their ids) and seals the group", e.Total, e.Err)
	}
	return fmt.Sprintf("publishing stopped after %d of %d jobs were stored: %v; the group is not sealed. "+
		"Re-running the same command is safe: stored jobs are recognised by their ids and not run twice", e.Stored, e.Total, e.Err)
}

// Unwrap returns Err.
func (e *PartialError) Unwrap() error { return e.Err }

// SubmitFile publishes jobs to groupID in chunks of chunk jobs (0 or less
// means DefaultChunk), calling progress (if not nil) with the number stored
// after each chunk, then seals the group at len(jobs). It stops at the
// first chunk with a failure and returns a *PartialError saying how many
// jobs are stored; a cancelled ctx is reported the same way.
func SubmitFile(ctx context.Context, cl *client.Client, groupID string, jobs []FileJob, chunk int, progress func(stored int)) error {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	batch := make([]client.Job, 0, chunk)
	stored := 0
	for i := 0; i < len(jobs); i += chunk {
		batch = batch[:0]
		for _, j := range jobs[i:min(i+chunk, len(jobs))] {
			batch = append(batch, j.Job)
		}
		if err := ctx.Err(); err != nil {
			return &PartialError{Stored: stored, Total: len(jobs), Err: err}
		}
		if err := cl.Submit(ctx, groupID, batch...); err != nil {
			var se *client.SubmitError
			if errors.As(err, &se) {
				stored += len(batch) - len(se.Failed)
			}
			return &PartialError{Stored: stored, Total: len(jobs), Err: err}
		}
		stored += len(batch)
		if progress != nil {
			progress(stored)
		}
	}
	if err := cl.Seal(ctx, groupID, int64(len(jobs))); err != nil {
		return &PartialError{Stored: stored, Total: len(jobs), Err: err}
	}
	return nil
}
