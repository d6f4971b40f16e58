package redisq

import (
	"context"
	"fmt"
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// GroupCounts are a group's state and counters.
type GroupCounts struct {
	State contracts.GroupState
	// Declared is the sealed total, or -1 while the group is not sealed.
	Declared int64
	// Jobs counts distinct jobs received.
	Jobs      int64
	Done      int64
	Succeeded int64
	Failed    int64
	Cancelled int64
}

// Sealed reports whether the group's total has been declared.
func (c GroupCounts) Sealed() bool { return c.Declared >= 0 }

func parseCounts(l []any) GroupCounts {
	st := toStr(l[0])
	if st == "NONE" {
		st = ""
	}
	return GroupCounts{
		State: contracts.GroupState(st), Declared: toInt(l[1]), Jobs: toInt(l[2]),
		Done: toInt(l[3]), Succeeded: toInt(l[4]), Failed: toInt(l[5]), Cancelled: toInt(l[6]),
	}
}

// RecordOutcome says what Record did.
type RecordOutcome string

// Record outcomes.
const (
	// Recorded: the result was counted.
	Recorded RecordOutcome = "recorded"
	// DuplicateResult: the job was already terminal; nothing changed.
	DuplicateResult RecordOutcome = "duplicate"
	// UnknownJob: no such job (never enqueued, or its hash expired).
	UnknownJob RecordOutcome = "unknown"
)

// RecordResult is what Record did and the group's counters after it.
type RecordResult struct {
	Outcome RecordOutcome
	// Completed is true when this result completed the group.
	Completed bool
	// CreatedAtMs is when the job was enqueued (0 if unknown).
	CreatedAtMs int64
	Group       GroupCounts
}

// Record marks a job terminal exactly once (SUCCESS or FAILED) and counts it;
// a second record of the same job is a no-op reporting DuplicateResult. A
// sealed group whose every job is terminal becomes COMPLETED: it leaves the
// active set, its congestion state is dropped and its keys get their TTLs.
func (q *Queue) Record(ctx context.Context, r contracts.JobResult) (*RecordResult, error) {
	out, err := q.RecordBatch(ctx, []contracts.JobResult{r})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// recordReplyWidth is the number of reply values per result: outcome,
// completed, createdAt and the 7 values parseCounts reads.
const recordReplyWidth = 10

// RecordBatch records several results, returning one RecordResult per
// result, in order, as if they were recorded one after the other: a later
// result for a job an earlier one made terminal is a DuplicateResult. It
// takes one script call per 512 results, all in one round trip. A call that
// fails records none of its results; with more than 512 results, the calls
// before it stay recorded (recording those results again reports them as
// duplicates).
func (q *Queue) RecordBatch(ctx context.Context, rs []contracts.JobResult) ([]*RecordResult, error) {
	for _, r := range rs {
		if r.Status != contracts.ResultSuccess && r.Status != contracts.ResultFailed {
			return nil, fmt.Errorf("redisq: record %s/%s: status %q: must be SUCCESS or FAILED", r.GroupID, r.JobID, r.Status)
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	replies, err := pipelineChunks(ctx, q, "record", recordScript, rs, q.recordCall)
	if err != nil {
		return nil, err
	}
	out := make([]*RecordResult, 0, len(rs))
	for c, v := range replies {
		l, want := toList(v), len(chunkOf(rs, c))
		if len(l) != want*recordReplyWidth {
			return nil, fmt.Errorf("redisq: record script: %d reply values for %d results", len(l), want)
		}
		for i := 0; i < want; i++ {
			e := l[i*recordReplyWidth : (i+1)*recordReplyWidth]
			out = append(out, &RecordResult{
				Outcome:     RecordOutcome(toStr(e[0])),
				Completed:   toInt(e[1]) == 1,
				CreatedAtMs: toInt(e[2]),
				Group:       parseCounts(e[3:]),
			})
		}
	}
	return out, nil
}

// recordCall builds the keys and arguments of one record script call (see
// lua/record.lua): the meta key of each group touched, in order of first
// appearance, then each result with its group's index.
func (q *Queue) recordCall(rs []contracts.JobResult) ([]string, []any) {
	index := make(map[string]int, 8)
	var keys []string
	var gids []any
	results := make([]any, 0, 5*len(rs))
	for _, r := range rs {
		g, ok := index[r.GroupID]
		if !ok {
			keys = append(keys, q.keys.GroupMeta(r.GroupID))
			gids = append(gids, r.GroupID)
			g = len(keys)
			index[r.GroupID] = g
		}
		results = append(results, g, r.JobID, string(r.Status), r.Error, r.Attempt)
	}
	args := make([]any, 0, 4+len(gids)+len(results))
	args = append(args, q.keys.Prefix(), q.now(), secs(q.cfg.JobTTL), secs(q.cfg.GroupTTL))
	args = append(args, gids...)
	args = append(args, results...)
	return keys, args
}

// SealOutcome says what Seal did.
type SealOutcome string

// Seal outcomes.
const (
	// Sealed: the total is now declared.
	Sealed SealOutcome = "sealed"
	// SealSame: the group was already sealed with this total (a redelivered seal).
	SealSame SealOutcome = "same"
	// SealConflict: the group was sealed with another total.
	SealConflict SealOutcome = "conflict"
	// SealTooMany: more distinct jobs than the total have already arrived.
	SealTooMany SealOutcome = "too_many"
	// SealEnded: the group was already cancelled or completed.
	SealEnded SealOutcome = "ended"
)

// SealResult is what Seal did and the group's counters after it.
type SealResult struct {
	Outcome SealOutcome
	// Transition is the state the seal moved the group to, or "".
	Transition contracts.GroupState
	Group      GroupCounts
}

// Seal declares that the group has exactly total distinct jobs. It may come
// before, during or after the jobs and their results.
func (q *Queue) Seal(ctx context.Context, groupID string, total int64) (*SealResult, error) {
	if total < 0 {
		return nil, fmt.Errorf("redisq: seal: total %d: must be >= 0", total)
	}
	v, err := q.run(ctx, "seal", sealScript,
		[]string{q.keys.GroupMeta(groupID), q.keys.GroupJobs(groupID)},
		q.keys.Prefix(), groupID, total, q.now(), secs(q.cfg.GroupTTL))
	if err != nil {
		return nil, err
	}
	l := toList(v)
	return &SealResult{Outcome: SealOutcome(toStr(l[0])), Transition: contracts.GroupState(toStr(l[1])), Group: parseCounts(l[2:])}, nil
}

// CancelOutcome says what Cancel did.
type CancelOutcome string

// Cancel outcomes.
const (
	// Cancelled: the group is now CANCELLED. A group cancelled before its
	// first job is created CANCELLED: jobs that follow are rejected.
	Cancelled CancelOutcome = "cancelled"
	// CancelEnded: the group had already ended.
	CancelEnded CancelOutcome = "ended"
)

// CancelResult is what Cancel did.
type CancelResult struct {
	Outcome CancelOutcome
	// Dropped counts the queued and backed-off jobs cancelled.
	Dropped int64
	Group   GroupCounts
}

// Cancel ends a group early: its queued and backed-off jobs are dropped and
// counted as cancelled; jobs already handed out finish and are counted.
func (q *Queue) Cancel(ctx context.Context, groupID string) (*CancelResult, error) {
	v, err := q.run(ctx, "cancel", cancelScript,
		append(q.keys.FairQueues(), q.keys.GroupMeta(groupID), q.keys.GroupJobs(groupID), q.keys.NonReadyQueue()),
		q.keys.Prefix(), groupID, q.now(), secs(q.cfg.JobTTL), secs(q.cfg.GroupTTL))
	if err != nil {
		return nil, err
	}
	l := toList(v)
	return &CancelResult{Outcome: CancelOutcome(toStr(l[0])), Dropped: toInt(l[1]), Group: parseCounts(l[2:])}, nil
}

// GroupInfo is a group's meta hash.
type GroupInfo struct {
	ID           string
	GroupCounts  // state and counters
	Priority     contracts.Priority
	BasePriority int64
	Pending      int64 // jobs queued in the fair queue now
	CreatedAtMs  int64
	StartedAtMs  int64
	FinishedAtMs int64
	// LastProgressAtMs is when the group's last result was recorded.
	LastProgressAtMs int64
	Meta             map[string]string // the raw meta hash
}

// Group reads a group's meta and its pending count. ok is false when the
// group does not exist (or its meta expired).
func (q *Queue) Group(ctx context.Context, groupID string) (info *GroupInfo, ok bool, err error) {
	pipe := q.rdb.Pipeline()
	m := pipe.HGetAll(ctx, q.keys.GroupMeta(groupID))
	l := pipe.LLen(ctx, q.keys.GroupJobs(groupID))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, false, fmt.Errorf("redisq: group %s: %w", groupID, err)
	}
	pending := l.Val()
	h := m.Val()
	if len(h) == 0 {
		return nil, false, nil
	}
	n := func(k string) int64 { x, _ := strconv.ParseInt(h[k], 10, 64); return x }
	declared := int64(-1)
	if _, ok := h["declaredTotal"]; ok {
		declared = n("declaredTotal")
	}
	info = &GroupInfo{
		ID: groupID,
		GroupCounts: GroupCounts{
			State: contracts.GroupState(h["status"]), Declared: declared, Jobs: n("totalJobs"),
			Done: n("doneJobs"), Succeeded: n("successCount"), Failed: n("failedCount"), Cancelled: n("cancelledCount"),
		},
		Priority: contracts.Priority(h["priorityLevel"]), BasePriority: n("basePriority"),
		Pending: pending, CreatedAtMs: n("createdAt"), StartedAtMs: n("startedAt"), FinishedAtMs: n("finishedAt"),
		LastProgressAtMs: n("lastProgressAt"),
		Meta:             h,
	}
	return info, true, nil
}

// PendingJobs returns the number of jobs of a group waiting in the fair queue.
func (q *Queue) PendingJobs(ctx context.Context, groupID string) (int64, error) {
	return q.rdb.LLen(ctx, q.keys.GroupJobs(groupID)).Result()
}

// GroupsPerLevel returns how many groups wait at each priority level.
func (q *Queue) GroupsPerLevel(ctx context.Context) (map[contracts.Priority]int64, error) {
	pipe := q.rdb.Pipeline()
	cmds := map[contracts.Priority]interface{ Val() int64 }{}
	for _, p := range contracts.Priorities {
		cmds[p] = pipe.ZCard(ctx, q.keys.FairQueue(p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: groups per level: %w", err)
	}
	out := make(map[contracts.Priority]int64, len(cmds))
	for p, c := range cmds {
		out[p] = c.Val()
	}
	return out, nil
}
