package redisq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// Confirm ends the leases of jobs the caller has handed on (published to
// READY and acknowledged). A job's READY room reservation ([WithReadySeq])
// then waits for a measurement that shows its message: the one at
// [LeasedJob.ReadySeq], or, when that is 0 (unknown), ends at once.
// Confirming an unknown or already confirmed job is harmless.
func (q *Queue) Confirm(ctx context.Context, jobs ...LeasedJob) error {
	if len(jobs) == 0 {
		return nil
	}
	if q.sharded() {
		return q.onShards(q.shardIndexes(len(jobs), func(i int) string { return jobs[i].Group.Tenant }), func(s *Queue, ix []int) error {
			return s.Confirm(ctx, pick(jobs, ix)...)
		})
	}
	members := make([]any, len(jobs))
	published := map[string][]redis.Z{} // by type: one ZADD each
	unpublished := map[string][]any{}
	var types []string // in the order first seen
	for i := range jobs {
		j := &jobs[i]
		var m any = j.inflightMember() // boxed once for both lists
		members[i] = m
		if published[j.Type] == nil && unpublished[j.Type] == nil {
			types = append(types, j.Type)
		}
		if j.ReadySeq > 0 {
			published[j.Type] = append(published[j.Type], redis.Z{Score: float64(j.ReadySeq), Member: m})
		} else {
			unpublished[j.Type] = append(unpublished[j.Type], m)
		}
	}
	pipe := q.rdb.TxPipeline()
	for _, t := range types {
		if zs := published[t]; len(zs) > 0 {
			// XX: a reservation that lapsed, or was never made, stays gone
			pipe.ZAddXX(ctx, q.keys.ReadyReserved(t), zs...)
		}
		if ms := unpublished[t]; len(ms) > 0 {
			pipe.ZRem(ctx, q.keys.ReadyReserved(t), ms...)
		}
	}
	pipe.ZRem(ctx, q.keys.Inflight(), members...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisq: confirm: %w", err)
	}
	return nil
}

// Relet leases again, each as a new attempt, jobs whose READY publish
// JetStream dropped as a duplicate of a message that is no longer on READY
// (docs/ARCHITECTURE.md §6.2): their message id had been used by a
// hand-out that Redis lost (a failover that dropped recent writes), and
// that message was consumed. Only a job still leased as the attempt in
// jobs is re-leased (its attempt + 1, a new lease deadline); the others
// moved on (claimed, cancelled, put back) and are left out of the result.
// Publish the returned jobs, then [Queue.Confirm] them.
func (q *Queue) Relet(ctx context.Context, jobs []LeasedJob) ([]LeasedJob, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if q.sharded() {
		parts := make([][]LeasedJob, len(jobs))
		err := q.onShards(q.shardIndexes(len(jobs), func(i int) string { return jobs[i].Group.Tenant }), func(s *Queue, ix []int) error {
			out, err := s.Relet(ctx, pick(jobs, ix))
			parts[ix[0]] = out
			return err
		})
		if err != nil {
			return nil, err
		}
		return slices.Concat(parts...), nil
	}
	// one call per chunk, one after the other: relets are rare
	var replies []any
	for c := 0; c*scriptChunk < len(jobs); c++ {
		part := chunkOf(jobs, c)
		args := make([]any, 0, 3+3*len(part))
		args = append(args, q.keys.Prefix(), q.now(), ms(q.cfg.Lease))
		for _, j := range part {
			args = append(args, groupKey(j.Group), j.ID, j.Attempt)
		}
		v, err := q.run(ctx, "relet", reletScript, []string{q.keys.Inflight()}, args...)
		if err != nil {
			return nil, err
		}
		replies = append(replies, v)
	}
	var out []LeasedJob
	k := 0
	for _, v := range replies {
		for _, a := range toList(v) {
			if k >= len(jobs) {
				return nil, fmt.Errorf("redisq: relet script: more replies than %d jobs", len(jobs))
			}
			if n := toInt(a); n > 0 {
				j := jobs[k]
				j.Attempt, j.ReadySeq = int(n), 0
				out = append(out, j)
			}
			k++
		}
	}
	if k != len(jobs) {
		return nil, fmt.Errorf("redisq: relet script: %d replies for %d jobs", k, len(jobs))
	}
	return out, nil
}

// ExpiredLeases lists up to n leases whose deadline has passed, without
// touching them, as "<tenant>:<groupId>:<jobId>".
func (q *Queue) ExpiredLeases(ctx context.Context, n int) ([]string, error) {
	if q.sharded() {
		var out []string
		for _, s := range q.shards {
			if len(out) >= n {
				break
			}
			l, err := s.ExpiredLeases(ctx, n-len(out))
			if err != nil {
				return nil, err
			}
			out = append(out, l...)
		}
		return out, nil
	}
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	return q.rdb.ZRangeByScore(ctx, q.keys.Inflight(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: int64(n)}).Result()
}

// ReclaimResult is the outcome of Reclaim.
type ReclaimResult struct {
	// Jobs are re-leased with their attempt unchanged: re-publish them with
	// the same message id.
	Jobs []LeasedJob
	// NextDeadlineMs is the earliest remaining lease deadline, -1 if none.
	NextDeadlineMs int64
	// Requeued counts expired leases of paused groups: those jobs went back
	// into their groups' queues (a delivery of the old attempt is stale)
	// and are admitted again when their groups are resumed.
	Requeued int
}

// Reclaim takes up to n expired leases (a holder died between lease and
// hand-over) and leases them again to the caller; a job of a paused group
// goes back into its group's queue instead and frees its in-flight slot.
func (q *Queue) Reclaim(ctx context.Context, n int) (*ReclaimResult, error) {
	if q.sharded() {
		res := &ReclaimResult{NextDeadlineMs: -1}
		for _, s := range q.shards {
			if len(res.Jobs)+res.Requeued >= n {
				res.NextDeadlineMs = 0 // shards not asked may have some
				break
			}
			r, err := s.Reclaim(ctx, n-len(res.Jobs)-res.Requeued)
			if err != nil {
				if len(res.Jobs) > 0 {
					return res, nil // hand these on; the rest at the next call
				}
				return nil, err
			}
			res.Jobs = append(res.Jobs, r.Jobs...)
			res.Requeued += r.Requeued
			res.NextDeadlineMs = minDue(res.NextDeadlineMs, r.NextDeadlineMs)
		}
		return res, nil
	}
	v, err := q.run(ctx, "reclaim", reclaimScript, []string{q.keys.Inflight()},
		q.keys.Prefix(), n, ms(q.cfg.Lease), q.now(), q.cfg.Alpha)
	if err != nil {
		return nil, err
	}
	l := toList(v)
	jobs, err := parseJobs(toList(l[0]))
	if err != nil {
		return nil, err
	}
	return &ReclaimResult{Jobs: jobs, NextDeadlineMs: toInt(l[1]), Requeued: int(toInt(l[2]))}, nil
}

// ReleaseResult is the outcome of Release.
type ReleaseResult struct {
	// Jobs are due jobs, now leased with attempt+1.
	Jobs []LeasedJob
	// NextDueMs is the due time of the earliest job left, -1 if none.
	NextDueMs int64
	// Cancelled counts due jobs of cancelled groups, counted as cancelled.
	Cancelled int
	// Requeued counts due jobs of paused groups, or of groups at their
	// in-flight limit: they went back into their groups' queues, where
	// admission takes them when the group is resumed or a slot frees.
	Requeued int
	// RateHeld counts, per job type, due jobs whose type's rate limit
	// ([Config.TypeLimits]) was used up: they went back into their groups'
	// queues (which are queued), where admission takes them in fair order
	// once the type has rate again.
	RateHeld map[string]int
	// ReadyHeld counts, per job type, due jobs whose type had no READY room
	// left ([WithTypeRooms]): they went back into their groups' queues as
	// for RateHeld.
	ReadyHeld map[string]int
	// TimeUp is set when the call stopped at [Config.ScriptTimeBudget] with due
	// jobs left: call again.
	TimeUp bool
	// ToGrants counts, with shards ([Config.Shards]), due jobs put back into
	// their groups' queues (which are queued) instead of leased: the owners
	// of their shards admit them in fair order within the grants of the
	// global limits, so retries count toward those limits as any admission
	// (docs/ARCHITECTURE.md §11.1).
	ToGrants int
}

// Handled is how many due jobs the call dealt with: leased, counted as
// cancelled, or put back into their groups' queues.
func (r *ReleaseResult) Handled() int {
	n := len(r.Jobs) + r.Cancelled + r.Requeued + r.ToGrants
	for _, c := range r.RateHeld {
		n += c
	}
	for _, c := range r.ReadyHeld {
		n += c
	}
	return n
}

// Release takes up to n due jobs out of the non-ready queue (one call),
// decrements their groups' non-ready counters and leases them. Any number
// of callers may run at once: a due job is released once. In paced mode the
// released jobs also pass the global rate gate, and in both gated modes the
// per-type limits (ReleaseResult.RateHeld). A due job of a paused group,
// or of a group at its in-flight limit, is put back into its group's queue
// instead (ReleaseResult.Requeued). [WithTypeRooms] and [WithReadySeq]
// bound the released jobs of each type by its READY room, as for Admit: a
// due job whose type has no room goes back into its group's queue
// (ReleaseResult.ReadyHeld). With shards, due jobs are put back into their
// groups' queues instead, for the shards' owners to admit under the grants
// (ReleaseResult.ToGrants).
func (q *Queue) Release(ctx context.Context, n int, opts ...AdmitOption) (*ReleaseResult, error) {
	var o admitOptions
	for _, opt := range opts {
		opt(&o)
	}
	if q.sharded() {
		return q.releaseSharded(ctx, n, o)
	}
	return q.release(ctx, n, o, false)
}

// release is Release on q's own keys; toGrants puts the due jobs back into
// their groups' queues (a shard of a sharded queue).
func (q *Queue) release(ctx context.Context, n int, o admitOptions, toGrants bool) (*ReleaseResult, error) {
	flag := ""
	if toGrants {
		flag = "1"
	}
	v, err := q.run(ctx, "release", releaseScript,
		[]string{q.keys.NonReadyQueue(), q.keys.Inflight(), q.keys.RatePacer()},
		q.keys.Prefix(), n, ms(q.cfg.Lease), q.now(), q.cfg.Mode, q.cfg.GlobalLimit, ms(q.cfg.Window),
		float64(q.cfg.Burst)/1e6, secs(q.cfg.JobTTL), q.limitsWith(o.learned), q.cfg.Alpha, o.rooms, o.seq, micros(q.cfg.ScriptTimeBudget),
		flag)
	if err != nil {
		return nil, err
	}
	l := toList(v)
	jobs, err := parseJobs(toList(l[0]))
	if err != nil {
		return nil, err
	}
	return &ReleaseResult{Jobs: jobs, NextDueMs: toInt(l[1]), Cancelled: int(toInt(l[2])),
		Requeued: int(toInt(l[3])), RateHeld: toCounts(l[4]), ReadyHeld: toCounts(l[5]), TimeUp: toInt(l[6]) == 1,
		ToGrants: int(toInt(l[7]))}, nil
}

// releaseSharded is Release over the shards, each in turn from the first,
// with what the shards before it left of n: each puts its due jobs back
// into their groups' queues, for its owner to admit under its grants.
func (q *Queue) releaseSharded(ctx context.Context, n int, o admitOptions) (*ReleaseResult, error) {
	res := &ReleaseResult{NextDueMs: -1}
	for _, s := range q.shards {
		if n <= 0 {
			res.TimeUp = true // the shards not asked may have due jobs
			break
		}
		r, err := s.release(ctx, n, o, true)
		if err != nil {
			if len(res.Jobs) > 0 {
				res.TimeUp = true
				return res, nil // hand these on; the rest at the next call
			}
			return nil, err
		}
		res.Jobs = append(res.Jobs, r.Jobs...)
		res.NextDueMs = minDue(res.NextDueMs, r.NextDueMs)
		res.Cancelled += r.Cancelled
		res.Requeued += r.Requeued
		res.RateHeld = addCounts(res.RateHeld, r.RateHeld)
		res.ReadyHeld = addCounts(res.ReadyHeld, r.ReadyHeld)
		res.TimeUp = res.TimeUp || r.TimeUp
		res.ToGrants += r.ToGrants
		n -= r.Handled() // a shard leases none: READY's rooms stay whole
	}
	return res, nil
}

// minDue is the earlier of two due times, where -1 means none.
func minDue(a, b int64) int64 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// deliveryTenant is a delivery's tenant.
func deliveryTenant(d Delivery) string { return d.Group.Tenant }

// ClaimOutcome says whether a worker may run a delivered job.
type ClaimOutcome string

// Claim outcomes.
const (
	// ClaimRun: the delivery carries the current attempt; run the job.
	ClaimRun ClaimOutcome = "run"
	// ClaimStale: another attempt is current, or the job is terminal or
	// gone; acknowledge the delivery and drop it.
	ClaimStale ClaimOutcome = "stale"
	// ClaimCancelled: the group was cancelled; the job was counted as
	// cancelled and must not run.
	ClaimCancelled ClaimOutcome = "cancelled"
	// ClaimBusy: another holder's live claim has the job (it runs, or its
	// result is on the way): this is a second delivery of the same attempt
	// and must not run. Hand it back for [Claimed.RetryIn]; by then the job
	// has ended (the delivery is then stale) or its claim has expired.
	ClaimBusy ClaimOutcome = "busy"
)

// ClaimOption sets an option of [Queue.ClaimBatch].
type ClaimOption func(*claimOptions)

type claimOptions struct{ holder string }

// ClaimHolder names the holder (a worker process) claiming the jobs: a
// second delivery of a job it holds is stale for it, and busy for any other
// holder while its claim lives ([ClaimBusy]), unless the holder is declared
// gone ([Queue.HolderGone]).
func ClaimHolder(id string) ClaimOption { return func(o *claimOptions) { o.holder = id } }

// Claim marks a delivered job RUNNING if the delivery's attempt is the
// job's current one (docs/ARCHITECTURE.md §6.3). A redelivery of the same attempt (the
// previous worker died) may run again. It is a [Queue.ClaimBatch] of one.
func (q *Queue) Claim(ctx context.Context, g contracts.GroupRef, jobID string, attempt int) (ClaimOutcome, error) {
	out, err := q.ClaimBatch(ctx, []Delivery{{Group: g, JobID: jobID, Attempt: attempt}})
	if err != nil {
		return "", err
	}
	return out[0].Outcome, nil
}

// Claimed is the outcome of claiming one delivery.
type Claimed struct {
	Outcome ClaimOutcome
	// Claims counts the claims of this attempt so far, this one included,
	// when Outcome is ClaimRun (0 otherwise). Only deliveries that reached
	// Redis count: a delivery handed back because Redis was unreachable
	// does not, so an outage spends none of a job's poison budget.
	Claims int
	// Throttles counts the job's earlier attempts that were rate limited
	// (retried with [Throttled]) when Outcome is ClaimRun: they do not count
	// as errors against the retry budget.
	Throttles int
	// Suspect says the job was RUNNING as this attempt and its holder never
	// handed it back ([Queue.HandBack]): the holder stopped while the job
	// ran or waited to run, and the job may have stopped it. A suspect runs
	// alone ([Queue.SoloRun]).
	Suspect bool
	// RetryIn is, when Outcome is ClaimBusy, how long until the live claim
	// on the job expires unless renewed.
	RetryIn time.Duration
}

// Delivery identifies one delivered attempt of a job, as a READY message
// carries it.
type Delivery struct {
	Group   contracts.GroupRef
	JobID   string
	Attempt int
}

// ClaimBatch claims several deliveries in one round trip and returns one
// outcome per delivery, in order; each is claimed as [Queue.Claim] would.
// The same job twice in one batch runs at most once: the second delivery
// is stale.
func (q *Queue) ClaimBatch(ctx context.Context, ds []Delivery, opts ...ClaimOption) ([]Claimed, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	if q.sharded() {
		return splitCall(q, ds, deliveryTenant, func(s *Queue, part []Delivery) ([]Claimed, error) {
			return s.ClaimBatch(ctx, part, opts...)
		})
	}
	var o claimOptions
	for _, opt := range opts {
		opt(&o)
	}
	replies, err := pipelineChunks(ctx, q, "claim", claimScript, ds, func(part []Delivery) ([]string, []any) {
		args := make([]any, 0, 5+3*len(part))
		args = append(args, q.keys.Prefix(), q.now(), secs(q.cfg.JobTTL), ms(q.cfg.ClaimTTL), o.holder)
		for _, d := range part {
			args = append(args, groupKey(d.Group), d.JobID, d.Attempt)
		}
		return []string{q.keys.Inflight(), q.keys.Claims(), q.keys.HoldersGone()}, args
	})
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(ds))
	for _, v := range replies {
		for _, o := range toList(v) {
			s := toStr(o)
			if n, ok := strings.CutPrefix(s, string(ClaimRun)+":"); ok {
				// <claims>:<throttles>:<suspect>, read without a slice per job
				c, rest, ok1 := strings.Cut(n, ":")
				t, suspect, ok2 := strings.Cut(rest, ":")
				if !ok1 || !ok2 || strings.IndexByte(suspect, ':') >= 0 {
					return nil, fmt.Errorf("redisq: claim script: outcome %q", s)
				}
				claims, err1 := strconv.Atoi(c)
				throttles, err2 := strconv.Atoi(t)
				if err1 != nil || err2 != nil {
					return nil, fmt.Errorf("redisq: claim script: outcome %q", s)
				}
				out = append(out, Claimed{Outcome: ClaimRun, Claims: claims, Throttles: throttles, Suspect: suspect == "1"})
				continue
			}
			if n, ok := strings.CutPrefix(s, string(ClaimBusy)+":"); ok {
				ms, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("redisq: claim script: outcome %q", s)
				}
				out = append(out, Claimed{Outcome: ClaimBusy, RetryIn: time.Duration(ms) * time.Millisecond})
				continue
			}
			out = append(out, Claimed{Outcome: ClaimOutcome(s)})
		}
	}
	if len(out) != len(ds) {
		return nil, fmt.Errorf("redisq: claim script: %d outcomes for %d deliveries", len(out), len(ds))
	}
	return out, nil
}

// parseJobs reads the scripts' list of leased jobs, one entry each
// (parseLease). An error names a malformed entry by its place and size,
// not its bytes: they hold the job's payload.
func parseJobs(entries []any) ([]LeasedJob, error) {
	jobs := make([]LeasedJob, len(entries))
	for i, v := range entries {
		e := toStr(v)
		j, ok := parseLease(e)
		if !ok {
			return nil, fmt.Errorf("redisq: leased job entry %d of %d (%d bytes) is malformed", i+1, len(entries), len(e))
		}
		jobs[i] = j
	}
	return jobs, nil
}

// parseLease reads a leased job from its entry in a script's reply
// (lib.lua lease_entry): <attempt> <gk>:<jid> <type> <trace> <dest> <payload>,
// joined by single spaces. Its strings share e's bytes (the job keeps
// <gk>:<jid>, its inflight member, for [Queue.Confirm]); the payload is
// copied.
func parseLease(e string) (LeasedJob, bool) {
	var f [5]string
	rest := e
	for k := range f {
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			return LeasedJob{}, false
		}
		f[k], rest = rest[:i], rest[i+1:]
	}
	attempt, err := strconv.Atoi(f[0])
	i := strings.LastIndexByte(f[1], ':')
	if err != nil || attempt < 0 || i <= 0 || i == len(f[1])-1 || strings.IndexByte(f[1][:i], ':') <= 0 {
		return LeasedJob{}, false
	}
	return LeasedJob{Group: parseGroupKey(f[1][:i]), ID: f[1][i+1:], Type: f[2], Attempt: attempt, Trace: f[3],
		Destination: f[4], Payload: []byte(rest), member: f[1]}, true
}

var (
	soloScript     = loadScript("solo")
	handBackScript = loadScript("handback")
	renewScript    = loadScript("renew")
	startScript    = loadScript("start")
)

func init() {
	allScripts["solo"] = soloScript
	allScripts["handback"] = handBackScript
	allScripts["renew"] = renewScript
	allScripts["start"] = startScript
}

// Start checks, just before a worker starts a job it claimed a while
// before (the job waited for a slot), that its group has not been
// cancelled since: the job of a cancelled group is counted as cancelled
// instead of run, as at claim time ([ClaimCancelled]), leaves its group's
// in-flight count, and its claim ends. It returns [ClaimRun] (start it),
// ClaimCancelled, or [ClaimStale] when the job is no longer RUNNING as that
// attempt. [Queue.StartBatch] checks many jobs in one call.
func (q *Queue) Start(ctx context.Context, d Delivery) (ClaimOutcome, error) {
	out, err := q.StartBatch(ctx, []Delivery{d})
	if err != nil {
		return "", err
	}
	return out[0], nil
}

// StartBatch is [Queue.Start] for many jobs: one script call per
// [scriptChunk] jobs, in one round trip; the outcomes are in ds' order.
func (q *Queue) StartBatch(ctx context.Context, ds []Delivery) ([]ClaimOutcome, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	if q.sharded() {
		return splitCall(q, ds, deliveryTenant, func(s *Queue, part []Delivery) ([]ClaimOutcome, error) {
			return s.StartBatch(ctx, part)
		})
	}
	replies, err := pipelineChunks(ctx, q, "start", startScript, ds, func(part []Delivery) ([]string, []any) {
		args := make([]any, 0, 3+3*len(part))
		args = append(args, q.keys.Prefix(), q.now(), secs(q.cfg.JobTTL))
		for _, d := range part {
			args = append(args, groupKey(d.Group), d.JobID, d.Attempt)
		}
		return []string{q.keys.Claims()}, args
	})
	if err != nil {
		return nil, err
	}
	out := make([]ClaimOutcome, 0, len(ds))
	for _, r := range replies {
		for _, v := range toList(r) {
			out = append(out, ClaimOutcome(toStr(v)))
		}
	}
	if len(out) != len(ds) {
		return nil, fmt.Errorf("redisq: start script: %d outcomes for %d jobs", len(out), len(ds))
	}
	return out, nil
}

// RenewClaims extends the claims of jobs a worker holds (claimed, running
// or waiting for a slot, or with a result not yet accepted by RESULT) by
// [Config.ClaimTTL] from now, and returns how many it extended: a job that
// is no longer RUNNING as the delivery's attempt is left alone. A worker
// calls it every third of ClaimTTL; the repair takes a run as lost only
// once its claim has expired (docs/ARCHITECTURE.md §6.5).
func (q *Queue) RenewClaims(ctx context.Context, ds []Delivery) (int, error) {
	if len(ds) == 0 {
		return 0, nil
	}
	if q.sharded() {
		var n atomic.Int64
		err := q.onShards(q.shardIndexes(len(ds), func(i int) string { return ds[i].Group.Tenant }), func(s *Queue, ix []int) error {
			k, err := s.RenewClaims(ctx, pick(ds, ix))
			n.Add(int64(k))
			return err
		})
		return int(n.Load()), err
	}
	replies, err := pipelineChunks(ctx, q, "renew", renewScript, ds, func(part []Delivery) ([]string, []any) {
		args := make([]any, 0, 3+3*len(part))
		args = append(args, q.keys.Prefix(), q.now(), ms(q.cfg.ClaimTTL))
		for _, d := range part {
			args = append(args, groupKey(d.Group), d.JobID, d.Attempt)
		}
		return []string{q.keys.Claims()}, args
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range replies {
		n += int(toInt(v))
	}
	return n, nil
}

// SoloRun counts a run of a suspect job ([Claimed.Suspect]) alone in its
// worker, and returns its number for the attempt (1 for the first): when
// the worker stops during such a run, the job is the cause, so these runs
// are the job's poison budget. ok is false when the job is no longer
// RUNNING as that attempt (stale).
func (q *Queue) SoloRun(ctx context.Context, g contracts.GroupRef, jobID string, attempt int) (n int, ok bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).SoloRun(ctx, g, jobID, attempt)
	}
	v, err := q.run(ctx, "solo", soloScript, []string{q.keys.Job(g, jobID)}, attempt)
	if err != nil {
		return 0, false, err
	}
	n = int(toInt(v))
	return n, n > 0, nil
}

// HandBack marks claimed jobs handed back on purpose (a worker's shutdown,
// a failed step), so that their next claim does not make them suspects,
// and ends their claims, so that their next delivery runs them at once.
func (q *Queue) HandBack(ctx context.Context, ds ...Delivery) error {
	return q.handBack(ctx, "", ds)
}

// HandBackHeld is [Queue.HandBack] of the jobs among ds that holder holds
// (claimed with [ClaimHolder]); the others are left alone. A worker whose
// claim call failed without an answer does not know whether the claim ran:
// if it did, the jobs are RUNNING under it and their next delivery would be
// dropped as its own; handing back what it holds lets that delivery run
// them.
func (q *Queue) HandBackHeld(ctx context.Context, holder string, ds ...Delivery) error {
	if holder == "" {
		return errors.New("redisq: hand back held jobs: no holder")
	}
	return q.handBack(ctx, holder, ds)
}

func (q *Queue) handBack(ctx context.Context, holder string, ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if q.sharded() {
		return q.onShards(q.shardIndexes(len(ds), func(i int) string { return ds[i].Group.Tenant }), func(s *Queue, ix []int) error {
			return s.handBack(ctx, holder, pick(ds, ix))
		})
	}
	keys := make([]string, 1, 1+len(ds))
	keys[0] = q.keys.Claims()
	args := make([]any, 0, 1+2*len(ds))
	args = append(args, holder)
	for _, d := range ds {
		keys = append(keys, q.keys.Job(d.Group, d.JobID))
		args = append(args, d.Attempt, groupKey(d.Group)+":"+d.JobID)
	}
	_, err := q.run(ctx, "handback", handBackScript, keys, args...)
	return err
}

// HolderGone declares that a holder (a worker process) has stopped, so that
// the claims it left no longer keep its jobs from running again before they
// expire: a worker restarted in the same place declares its predecessor
// gone when it hands back what the predecessor held (docs/ARCHITECTURE.md
// §6.3). Declarations are kept a day.
func (q *Queue) HolderGone(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	if q.sharded() {
		return q.eachShard(func(_ int, s *Queue) error { return s.HolderGone(ctx, id) })
	}
	now, err := q.Now(ctx)
	if err != nil {
		return err
	}
	if err := q.rdb.ZAdd(ctx, q.keys.HoldersGone(), redis.Z{Score: float64(now.UnixMilli()), Member: id}).Err(); err != nil {
		return fmt.Errorf("redisq: holder gone: %w", err)
	}
	return nil
}

// PruneClaims removes the claims that expired more than [Config.ClaimTTL]
// ago (runs that ended without their claim being removed: a cancel, a
// hand-back) and returns how many it removed. An expired claim and a
// missing one mean the same to the repair, so nothing else changes.
func (q *Queue) PruneClaims(ctx context.Context) (int64, error) {
	if q.sharded() {
		var n atomic.Int64
		err := q.eachShard(func(_ int, s *Queue) error {
			k, err := s.PruneClaims(ctx)
			n.Add(k)
			return err
		})
		return n.Load(), err
	}
	now, err := q.Now(ctx)
	if err != nil {
		return 0, err
	}
	max := strconv.FormatInt(now.Add(-q.cfg.ClaimTTL).UnixMilli(), 10)
	n, err := q.rdb.ZRemRangeByScore(ctx, q.keys.Claims(), "-inf", "("+max).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: prune claims: %w", err)
	}
	day := strconv.FormatInt(now.Add(-24*time.Hour).UnixMilli(), 10)
	if err := q.rdb.ZRemRangeByScore(ctx, q.keys.HoldersGone(), "-inf", "("+day).Err(); err != nil {
		return n, fmt.Errorf("redisq: prune holders: %w", err)
	}
	return n, nil
}
