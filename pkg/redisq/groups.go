package redisq

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
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

// groupReplyWidth is the number of values of a group reply (lua/lib.lua's
// group_reply), which parseCounts reads.
const groupReplyWidth = 7

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
	// FencedResult: the job is not in flight with the result's attempt
	// (docs/ARCHITECTURE.md §6.4): it is QUEUED or in BACKOFF, or another
	// attempt is current. Nothing changed. Such a result is late (an
	// attempt a retry or a repair already replaced), follows a loss of Redis
	// writes, or was forged; acknowledge it and drop it.
	FencedResult RecordOutcome = "fenced"
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
// result is recorded only while its job is in flight (leased, running, or
// dequeued) with the result's attempt; any other is a no-op reporting
// FencedResult (docs/ARCHITECTURE.md §6.4). A FAILED result also lists the
// job in its group's failures index ([Queue.Failures]). A
// sealed group whose every job is terminal becomes COMPLETED: its congestion
// state is dropped and its keys get their TTLs. A job that was in flight
// frees its slot of the group's in-flight limit. Each result names its group
// by Tenant and GroupID ([contracts.JobResult.Ref]).
func (q *Queue) Record(ctx context.Context, r contracts.JobResult) (*RecordResult, error) {
	out, err := q.RecordBatch(ctx, []contracts.JobResult{r})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// recordReplyWidth is the number of reply values per result (outcome,
// completed, createdAt), after a group reply of each group of the call.
const recordReplyWidth = 3

// RecordBatch records several results, returning one RecordResult per
// result, in order, as if they were recorded one after the other: a later
// result for a job an earlier one made terminal is a DuplicateResult. It
// takes one script call per 512 results, all in one round trip. A call that
// fails records none of its results; with more than 512 results, the calls
// before it stay recorded (recording those results again reports them as
// duplicates).
func (q *Queue) RecordBatch(ctx context.Context, rs []contracts.JobResult) ([]*RecordResult, error) {
	for i := range rs {
		r := &rs[i]
		if r.Status != contracts.ResultSuccess && r.Status != contracts.ResultFailed {
			return nil, fmt.Errorf("redisq: record %s/%s: status %q: must be SUCCESS or FAILED", r.Ref(), r.JobID, r.Status)
		}
		if err := r.Ref().Validate(); err != nil {
			return nil, fmt.Errorf("redisq: record %s/%s: %w", r.Ref(), r.JobID, err)
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	if q.sharded() {
		return splitCall(q, rs, func(r contracts.JobResult) string { return r.Tenant }, func(s *Queue, part []contracts.JobResult) ([]*RecordResult, error) {
			return s.RecordBatch(ctx, part)
		})
	}
	replies, err := pipelineChunks(ctx, q, "record", recordScript, rs, q.recordCall)
	if err != nil {
		return nil, err
	}
	out := make([]*RecordResult, 0, len(rs))
	for c, v := range replies {
		part, err := parseRecordReply(toList(v), chunkOf(rs, c))
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
	}
	return out, nil
}

// parseRecordReply reads one record script call's reply for its results
// rs: each group's reply before the first result (in the order the call
// named the groups: recordCall), then recordReplyWidth values per result.
// A result's group counts are its group's as they stood right after it:
// the group's reply with the recorded results up to it counted as the
// script counts them (lua/record.lua).
func parseRecordReply(l []any, rs []contracts.JobResult) ([]*RecordResult, error) {
	refs, of := resultGroups(rs)
	if len(l) != len(refs)*groupReplyWidth+len(rs)*recordReplyWidth {
		return nil, fmt.Errorf("redisq: record script: %d reply values for %d results of %d groups", len(l), len(rs), len(refs))
	}
	groups := make([]GroupCounts, len(refs))
	for g := range groups {
		groups[g] = parseCounts(l[g*groupReplyWidth:])
	}
	l = l[len(groups)*groupReplyWidth:]
	out := make([]RecordResult, len(rs))
	ptrs := make([]*RecordResult, len(rs))
	for i := range rs {
		e := l[i*recordReplyWidth : (i+1)*recordReplyWidth]
		r := &out[i]
		r.Outcome, r.Completed, r.CreatedAtMs = RecordOutcome(toStr(e[0])), toInt(e[1]) == 1, toInt(e[2])
		g := &groups[of[i]]
		if r.Outcome == Recorded {
			g.Done++
			if rs[i].Status == contracts.ResultSuccess {
				g.Succeeded++
			} else {
				g.Failed++
			}
			if r.Completed {
				g.State = contracts.StateCompleted
			}
		}
		r.Group = *g
		ptrs[i] = r
	}
	return ptrs, nil
}

// resultGroups numbers the groups of rs in order of first appearance, the
// order of a record call's KEYS and of the group counts its reply starts
// with: refs[g] is group g, and of[i] the group of rs[i].
func resultGroups(rs []contracts.JobResult) (refs []contracts.GroupRef, of []int) {
	index := make(map[contracts.GroupRef]int, 8)
	of = make([]int, len(rs))
	for i := range rs {
		ref := rs[i].Ref()
		g, ok := index[ref]
		if !ok {
			g = len(refs)
			index[ref] = g
			refs = append(refs, ref)
		}
		of[i] = g
	}
	return refs, of
}

// recordCall builds the keys and arguments of one record script call (see
// lua/record.lua): the meta key of each group touched (resultGroups), then
// each result with its group's index (from 1, as KEYS).
// The result statuses as script arguments, boxed once: a string put in an
// interface value is copied to the heap each time.
var (
	argSuccess any = string(contracts.ResultSuccess)
	argFailed  any = string(contracts.ResultFailed)
)

// statusArg is a result status as a script argument.
func statusArg(s contracts.ResultStatus) any {
	switch s {
	case contracts.ResultSuccess:
		return argSuccess
	case contracts.ResultFailed:
		return argFailed
	}
	return string(s)
}

func (q *Queue) recordCall(rs []contracts.JobResult) ([]string, []any) {
	refs, of := resultGroups(rs)
	keys := make([]string, len(refs))
	gks := make([]any, len(refs))
	for g, ref := range refs {
		keys[g], gks[g] = q.keys.GroupMeta(ref), groupKey(ref)
	}
	results := make([]any, 0, 5*len(rs))
	for i := range rs {
		r := &rs[i]
		results = append(results, of[i]+1, r.JobID, statusArg(r.Status), r.Error, r.Attempt)
	}
	args := make([]any, 0, 7+len(gks)+len(results))
	args = append(args, q.keys.Prefix(), q.now(), secs(q.cfg.JobTTL), secs(q.cfg.GroupTTL), q.cfg.Alpha, MaxFailuresKept,
		boolArg(q.cfg.DropSucceededJobs))
	args = append(args, gks...)
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
// before, during or after the jobs and their results. A seal brings an
// abandoned group back to life ([Queue.AbandonIdle]); a sealed group is never
// abandoned. Seals are not ordered by [SubmitSeq]: a seal only moves a group
// forward, and applied before or after a pause or resume it leaves the same
// state.
func (q *Queue) Seal(ctx context.Context, g contracts.GroupRef, total int64) (*SealResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Seal(ctx, g, total)
	}
	if total < 0 {
		return nil, fmt.Errorf("redisq: seal: total %d: must be >= 0", total)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: seal %s: %w", g, err)
	}
	v, err := q.run(ctx, "seal", sealScript,
		[]string{q.keys.GroupMeta(g), q.keys.GroupJobs(g)},
		q.keys.Prefix(), groupKey(g), total, q.now(), secs(q.cfg.GroupTTL))
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
// counted as cancelled; jobs already handed out finish and are counted. A
// paused group is cancelled the same way.
//
// The work is done in bounded script calls (lua/cancel.lua), each going
// through at most [DefaultSweepChunk] jobs ([SweepChunk] sets it): the first
// call makes the group CANCELLED, so nothing of it is admitted or released
// meanwhile, and Cancel calls again until the group has no queued or
// backed-off job left; its result counts every job it cancelled, and Group
// holds the counts after the last call. A cancel cut short (an error, a
// crash) is finished by the next Cancel of the group or by
// [Queue.FinishCancels].
func (q *Queue) Cancel(ctx context.Context, g contracts.GroupRef, opts ...SweepOption) (*CancelResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Cancel(ctx, g, opts...)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: cancel %s: %w", g, err)
	}
	return q.cancelSteps(ctx, g, false, sweepOptionsOf(opts))
}

// cancelSteps calls lua/cancel.lua until the cancel has nothing left;
// sweepOnly only goes on with a cancel under way.
func (q *Queue) cancelSteps(ctx context.Context, g contracts.GroupRef, sweepOnly bool, o sweepOptions) (*CancelResult, error) {
	only := "0"
	if sweepOnly {
		only = "1"
	}
	keys := []string{q.keys.GroupMeta(g), q.keys.GroupJobs(g), q.keys.NonReadyQueue(), q.keys.GroupIDs(g), q.keys.CancelSweep()}
	res := &CancelResult{}
	for {
		v, err := q.run(ctx, "cancel", cancelScript, keys,
			q.keys.Prefix(), g.Tenant, g.ID, q.now(), secs(q.cfg.JobTTL), secs(q.cfg.GroupTTL), o.chunk, only, micros(q.cfg.ScriptTimeBudget))
		if err != nil {
			return nil, err
		}
		l := toList(v)
		if res.Outcome == "" {
			res.Outcome = CancelOutcome(toStr(l[0]))
		}
		res.Dropped += toInt(l[1])
		res.Group = parseCounts(l[3:])
		if toInt(l[2]) == 0 {
			return res, nil
		}
	}
}

// ControlOutcome says what Pause or Resume did.
type ControlOutcome string

// Pause and Resume outcomes.
const (
	// Paused: the group is now PAUSED. A pause that arrives before the
	// group's first job creates the group PAUSED.
	Paused ControlOutcome = "paused"
	// Resumed: the group is back in the state it had when it was paused.
	Resumed ControlOutcome = "resumed"
	// ControlUnchanged: the group was already in that state (a pause of a
	// paused group, a resume of a group that is not paused).
	ControlUnchanged ControlOutcome = "unchanged"
	// ControlEnded: the group was cancelled or completed; nothing changed.
	ControlEnded ControlOutcome = "ended"
	// ControlUnknown: a resume of a group that does not exist; nothing changed.
	ControlUnknown ControlOutcome = "unknown"
	// ControlSuperseded: the message is older (its SUBMIT sequence,
	// [SubmitSeq]) than the last pause or resume the group took; nothing
	// changed. In publish order it came before that one, whose effect
	// stands: acknowledge it and drop it.
	ControlSuperseded ControlOutcome = "superseded"
)

// ControlOption sets an option of Pause or Resume.
type ControlOption func(*controlOptions)

type controlOptions struct{ seq uint64 }

// SubmitSeq orders a pause or resume by the SUBMIT stream sequence of the
// message that carried it (docs/ARCHITECTURE.md §6.1): it is applied only
// if seq is above the sequence of the last pause or resume the group took
// (its meta's ctlSeq), which it then becomes; an older one changes nothing
// and reports [ControlSuperseded]. So two fetchers, or a redelivery, that
// apply a pause and a resume out of their publish order leave the group in
// the state the later one published asks for. seq 0 (and no option) is
// unordered: the call applies whatever came before and leaves ctlSeq as it
// is.
func SubmitSeq(seq uint64) ControlOption {
	return func(o *controlOptions) { o.seq = seq }
}

func controlSeq(opts []ControlOption) uint64 {
	var o controlOptions
	for _, f := range opts {
		f(&o)
	}
	return o.seq
}

// ControlResult is what Pause or Resume did and the group's counters after it.
type ControlResult struct {
	Outcome ControlOutcome
	// Transition is the group's new state when it changed, "" otherwise.
	Transition contracts.GroupState
	Group      GroupCounts
}

// Pause pauses a group (docs/ARCHITECTURE.md §5): admission skips it, and it
// keeps its place in its tenant's queue until it is resumed. Its jobs that
// arrive meanwhile, come due in the non-ready queue or lose their lease go
// into its queue only; jobs already admitted run and are recorded as usual
// (a sealed paused group whose jobs all end completes). A pause before the
// group's first job creates the group PAUSED. The state the group had is
// kept and restored by Resume. With [SubmitSeq], an older pause than the
// last pause or resume applied changes nothing ([ControlSuperseded]). A
// pause is activity: a paused group is never abandoned ([Queue.AbandonIdle]),
// and an abandoned one is brought back to life.
func (q *Queue) Pause(ctx context.Context, g contracts.GroupRef, opts ...ControlOption) (*ControlResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Pause(ctx, g, opts...)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: pause %s: %w", g, err)
	}
	v, err := q.run(ctx, "pause", pauseScript, []string{q.keys.GroupMeta(g)},
		q.keys.Prefix(), g.Tenant, g.ID, q.now(), controlSeq(opts))
	if err != nil {
		return nil, err
	}
	return parseControl(v), nil
}

// Resume lets a paused group be admitted again: it gets back the state it
// had (RUNNING becomes AGGREGATING when the group was sealed and has no job
// queued any more) and the place it kept in its tenant's queue. With
// [SubmitSeq], an older resume than the last pause or resume applied
// changes nothing ([ControlSuperseded]). A resume is activity
// ([Queue.AbandonIdle]) and brings an abandoned group back to life.
func (q *Queue) Resume(ctx context.Context, g contracts.GroupRef, opts ...ControlOption) (*ControlResult, error) {
	if q.sharded() {
		return q.For(g.Tenant).Resume(ctx, g, opts...)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: resume %s: %w", g, err)
	}
	v, err := q.run(ctx, "resume", resumeScript, []string{q.keys.GroupMeta(g), q.keys.GroupJobs(g)},
		q.keys.Prefix(), groupKey(g), q.now(), q.cfg.Alpha, controlSeq(opts))
	if err != nil {
		return nil, err
	}
	return parseControl(v), nil
}

func parseControl(v any) *ControlResult {
	l := toList(v)
	return &ControlResult{Outcome: ControlOutcome(toStr(l[0])), Transition: contracts.GroupState(toStr(l[1])), Group: parseCounts(l[2:])}
}

// GroupInfo is a group's meta hash.
type GroupInfo struct {
	Group        contracts.GroupRef
	GroupCounts  // state and counters
	Priority     contracts.Priority
	BasePriority int64
	// MaxInFlight is the group's in-flight limit (0 = none).
	MaxInFlight int64
	// InFlight counts the group's admitted jobs that have not finished
	// (leased, running, or handed out without a lease). It is kept only for
	// a group with an in-flight limit (MaxInFlight > 0); 0 otherwise.
	InFlight int64
	// PausedFrom is the state a PAUSED group returns to when resumed ("" when
	// not paused).
	PausedFrom contracts.GroupState
	Pending    int64 // jobs queued in the fair queue now
	// NonReady counts the group's jobs in the non-ready (backoff) queue
	// now (its congestion counter), read in one transaction with the meta
	// and Pending: Declared, Jobs, Done, Cancelled, Pending and NonReady
	// are one consistent reading.
	NonReady     int64
	CreatedAtMs  int64
	StartedAtMs  int64
	FinishedAtMs int64
	// LastProgressAtMs is when the group's last result was recorded.
	LastProgressAtMs int64
	// Throttles counts the attempts of the group's jobs a downstream rate
	// limited (retried with [Throttled]); retries after ordinary errors are
	// not counted here (every retry is in [CongestionState]).
	Throttles int64
	Meta      map[string]string // the raw meta hash
}

// Group reads a group's meta, its pending count and its non-ready count in
// one transaction (MULTI/EXEC), so they are one consistent reading. ok is
// false when the group does not exist (or its meta expired).
func (q *Queue) Group(ctx context.Context, g contracts.GroupRef) (info *GroupInfo, ok bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).Group(ctx, g)
	}
	pipe := q.rdb.TxPipeline()
	m := pipe.HGetAll(ctx, q.keys.GroupMeta(g))
	l := pipe.LLen(ctx, q.keys.GroupJobs(g))
	nr := pipe.Get(ctx, q.keys.CongestionCount(g))
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, false, fmt.Errorf("redisq: group %s: %w", g, err)
	}
	nonReady, _ := nr.Int64()
	h := m.Val()
	if len(h) == 0 {
		return nil, false, nil
	}
	return groupInfo(g, h, l.Val(), nonReady), true, nil
}

// GroupState returns g's state, "" when the group does not exist.
func (q *Queue) GroupState(ctx context.Context, g contracts.GroupRef) (contracts.GroupState, error) {
	if q.sharded() {
		return q.For(g.Tenant).GroupState(ctx, g)
	}
	st, err := q.rdb.HGet(ctx, q.keys.GroupMeta(g), "status").Result()
	if err != nil && !isNil(err) {
		return "", fmt.Errorf("redisq: group %s: %w", g, err)
	}
	return contracts.GroupState(st), nil
}

// groupInfo reads a group's meta hash h.
func groupInfo(g contracts.GroupRef, h map[string]string, pending, nonReady int64) *GroupInfo {
	n := func(k string) int64 { x, _ := strconv.ParseInt(h[k], 10, 64); return x }
	declared := int64(-1)
	if _, ok := h["declaredTotal"]; ok {
		declared = n("declaredTotal")
	}
	return &GroupInfo{
		Group: g,
		GroupCounts: GroupCounts{
			State: contracts.GroupState(h["status"]), Declared: declared, Jobs: n("totalJobs"),
			Done: n("doneJobs"), Succeeded: n("successCount"), Failed: n("failedCount"), Cancelled: n("cancelledCount"),
		},
		Priority: contracts.Priority(h["priorityLevel"]), BasePriority: n("basePriority"),
		MaxInFlight: n("maxInFlight"), InFlight: n("inFlight"), PausedFrom: contracts.GroupState(h["pausedFrom"]),
		Pending: pending, NonReady: nonReady, CreatedAtMs: n("createdAt"), StartedAtMs: n("startedAt"), FinishedAtMs: n("finishedAt"),
		LastProgressAtMs: n("lastProgressAt"), Throttles: n("throttles"),
		Meta: h,
	}
}

// PendingJobs returns the number of jobs of a group waiting in the fair queue.
func (q *Queue) PendingJobs(ctx context.Context, g contracts.GroupRef) (int64, error) {
	if q.sharded() {
		return q.For(g.Tenant).PendingJobs(ctx, g)
	}
	return q.rdb.LLen(ctx, q.keys.GroupJobs(g)).Result()
}

// GroupsPerLevel returns how many groups wait at each priority level: the
// sizes of the waiting tenants' group ZSETs, summed per level (two round
// trips). Paused groups and groups at their in-flight limit are not waiting.
func (q *Queue) GroupsPerLevel(ctx context.Context) (map[contracts.Priority]int64, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) (map[contracts.Priority]int64, error) { return s.GroupsPerLevel(ctx) })
		if err != nil {
			return nil, err
		}
		out := map[contracts.Priority]int64{}
		for _, m := range parts {
			for p, n := range m {
				out[p] += n
			}
		}
		return out, nil
	}
	pipe := q.rdb.Pipeline()
	tenants := make(map[contracts.Priority]*redis.StringSliceCmd, len(contracts.Priorities))
	for _, p := range contracts.Priorities {
		tenants[p] = pipe.ZRange(ctx, q.keys.FairQueue(p), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: groups per level: %w", err)
	}
	out := make(map[contracts.Priority]int64, len(contracts.Priorities))
	cards := map[contracts.Priority][]*redis.IntCmd{}
	pipe = q.rdb.Pipeline()
	for _, p := range contracts.Priorities {
		out[p] = 0
		for _, t := range tenants[p].Val() {
			cards[p] = append(cards[p], pipe.ZCard(ctx, q.keys.TenantGroups(t, p)))
		}
	}
	if len(cards) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: groups per level: %w", err)
	}
	for p, cs := range cards {
		for _, c := range cs {
			out[p] += c.Val()
		}
	}
	return out, nil
}

// MaxTenantWeight is the largest tenant weight.
const MaxTenantWeight = 1000

// SetTenantWeight sets a tenant's weight (docs/ARCHITECTURE.md §4, §5): within
// a level, backlogged tenants are served in proportion to their weights, and
// a tenant's rate share is max(1, floor(limit / active tenants)) * weight.
// The weight is 1..MaxTenantWeight; 1, the default, removes the setting.
func (q *Queue) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if q.sharded() {
		return q.For(tenant).SetTenantWeight(ctx, tenant, weight)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("redisq: tenant weight: %w", err)
	}
	if weight < 1 || weight > MaxTenantWeight {
		return fmt.Errorf("redisq: tenant weight of %s: %d: must be between 1 and %d", tenant, weight, MaxTenantWeight)
	}
	var err error
	if weight == 1 {
		err = q.rdb.HDel(ctx, q.keys.TenantWeights(), tenant).Err()
	} else {
		err = q.rdb.HSet(ctx, q.keys.TenantWeights(), tenant, weight).Err()
	}
	if err != nil {
		return fmt.Errorf("redisq: tenant weight of %s: %w", tenant, err)
	}
	return nil
}

// TenantWeights returns the tenants whose weight is not the default 1.
func (q *Queue) TenantWeights(ctx context.Context) (map[string]int, error) {
	if q.sharded() {
		parts, err := gather(q, func(s *Queue) (map[string]int, error) { return s.TenantWeights(ctx) })
		if err != nil {
			return nil, err
		}
		out := map[string]int{}
		for _, m := range parts {
			maps.Copy(out, m)
		}
		return out, nil
	}
	h, err := q.rdb.HGetAll(ctx, q.keys.TenantWeights()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: tenant weights: %w", err)
	}
	out := make(map[string]int, len(h))
	for t, v := range h {
		w, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		out[t] = min(max(w, 1), MaxTenantWeight)
	}
	return out, nil
}
