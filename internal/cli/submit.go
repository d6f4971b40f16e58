package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
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

// SubmitFile publishes jobs to groupID (of cl's tenant), with the group
// settings set, in chunks of chunk jobs (0 or less means DefaultChunk), calling progress (if not nil) with the number stored
// after each chunk, then seals the group at len(jobs). It stops at the
// first chunk with a failure and returns a *PartialError saying how many
// jobs are stored; a cancelled ctx is reported the same way.
func SubmitFile(ctx context.Context, cl *client.Client, groupID string, set contracts.GroupSettings, jobs []FileJob, chunk int, progress func(stored int)) error {
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
		if err := cl.SubmitGroup(ctx, groupID, set, batch...); err != nil {
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

// ErrGroupRefuses is wrapped by [CheckGroup]'s errors: the group exists in
// a state or with settings that this submission cannot apply to, and
// nothing was submitted.
var ErrGroupRefuses = errors.New("the group cannot take this submission")

// GroupRequest is what a submission asks of its group.
type GroupRequest struct {
	// Jobs is the number of jobs the submission seals the group at.
	Jobs int64
	// Priority, BasePriority and MaxInFlight, when set (non-nil), are the
	// settings the submission asks for; a group keeps the settings it was
	// created with.
	Priority     *contracts.Priority
	BasePriority *int64
	MaxInFlight  *int64
}

// ErrOverQuota is wrapped by [CheckGroup]'s errors: the submission would
// take its tenant beyond a tenant quota (docs/ARCHITECTURE.md §5), and
// nothing was submitted.
var ErrOverQuota = errors.New("over the tenant's quota")

// CheckGroup reads g's state from the queue and returns an error
// wrapping [ErrGroupRefuses] when the submission would be rejected or would
// not do what it says: the group already ended (its jobs would be
// dead-lettered as group_ended), it is sealed at another total (the seal
// would be rejected), or it exists with other settings than requested.
// A group that does not exist yet, or sealed at the same total (a re-run),
// passes those checks. It then returns an error wrapping [ErrOverQuota],
// naming the quota and its limit, when the submission's messages would be
// dead-lettered as over_quota: the group does not exist and the tenant has
// its most active groups, or the submission's new jobs (its jobs less those
// the group already has: a re-run's are known) would take the tenant beyond
// its most queued jobs. The quotas are read with this process's defaults
// (BULKACTION_TENANT_MAX_*) and the tenant's own limits in Redis.
func CheckGroup(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, req GroupRequest) error {
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return err
	}
	if !ok {
		return checkQuotas(ctx, q, g, req.Jobs, true)
	}
	switch {
	case info.State.Terminal():
		return fmt.Errorf("%w: group %s already ended (%s); jobs sent to it are rejected. Nothing was submitted: use a new group id",
			ErrGroupRefuses, g, info.State)
	case info.Declared >= 0 && info.Declared != req.Jobs:
		return fmt.Errorf("%w: group %s is already sealed at %d jobs and this submission has %d; the seal would be rejected. Nothing was submitted",
			ErrGroupRefuses, g, info.Declared, req.Jobs)
	case req.Priority != nil && *req.Priority != info.Priority:
		return fmt.Errorf("%w: --priority %s: group %s exists with priority %s, and a group keeps the settings it was created with. Nothing was submitted",
			ErrGroupRefuses, *req.Priority, g, info.Priority)
	case req.BasePriority != nil && *req.BasePriority != info.BasePriority:
		return fmt.Errorf("%w: --base-priority %d: group %s exists with base priority %d, and a group keeps the settings it was created with. Nothing was submitted",
			ErrGroupRefuses, *req.BasePriority, g, info.BasePriority)
	case req.MaxInFlight != nil && *req.MaxInFlight != info.MaxInFlight:
		return fmt.Errorf("%w: --max-in-flight %d: group %s exists with max in flight %d, and a group keeps the settings it was created with. Nothing was submitted",
			ErrGroupRefuses, *req.MaxInFlight, g, info.MaxInFlight)
	}
	return checkQuotas(ctx, q, g, max(req.Jobs-info.Jobs, 0), false)
}

// checkQuotas returns an error wrapping [ErrOverQuota] when newJobs new jobs
// for g (a group that does not exist yet when create) would be refused by
// g's tenant's quotas.
func checkQuotas(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, newJobs int64, create bool) error {
	tq, err := q.TenantQuota(ctx, g.Tenant)
	if err != nil {
		return err
	}
	if limit := tq.MaxActiveGroups; create && limit > 0 && tq.ActiveGroups >= limit {
		return fmt.Errorf("%w: %s is %d and tenant %s has %d active groups, so group %s cannot be created; "+
			"its jobs would be dead-lettered as over_quota. Nothing was submitted: wait for groups to end, or raise the limit (bulkaction tenant quota)",
			ErrOverQuota, redisq.QuotaActiveGroups, limit, g.Tenant, tq.ActiveGroups, g.ID)
	}
	if limit := tq.MaxQueuedJobs; limit > 0 && tq.QueuedJobs+newJobs > limit {
		return fmt.Errorf("%w: %s is %d and tenant %s has %d queued jobs; this submission's %d new jobs would make %d, "+
			"and jobs beyond the limit would be dead-lettered as over_quota. Nothing was submitted: wait for jobs to finish, or raise the limit (bulkaction tenant quota)",
			ErrOverQuota, redisq.QuotaQueuedJobs, limit, g.Tenant, tq.QueuedJobs, newJobs, tq.QueuedJobs+newJobs)
	}
	return nil
}
