package redisq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// Job is a job to enqueue.
type Job struct {
	// Group is the job's group, named by tenant and groupId.
	Group contracts.GroupRef
	ID    string
	Type  string
	// Payload is the job's input.
	Payload []byte
	// Priority, BasePriority and MaxInFlight are the settings of the job's
	// group: a group keeps those of the first job that created it. Priority
	// "" means normal; MaxInFlight 0 means no in-flight limit.
	Priority     contracts.Priority
	BasePriority int64
	MaxInFlight  int64
	// CallbackURL is the completion callback of the job's group (""= none):
	// a group keeps that of the first job that created it, and the script
	// that ends the group schedules its delivery ([Queue.ClaimCallbacks]).
	CallbackURL string
	// NotBefore (RFC 3339, "" = none) and Windows (none = the tenant's
	// default windows, if any) are the schedule of the job's group: a group
	// keeps those of the first job that created it (docs/ARCHITECTURE.md
	// §5, Schedules).
	NotBefore string
	Windows   []contracts.Window
	// Trace is the W3C traceparent of the job's submission ("" = none); it
	// is kept with the job so later hops continue the same trace.
	Trace string
	// Destination names the downstream the job calls (docs/ARCHITECTURE.md
	// §5, adaptive rate): "" or its type means its type. An explicit one is
	// stored with the job and carried to its worker ([LeasedJob]), and
	// admission gates the job by its learned rate as well as its type's
	// limit; a tenant has at most [AdaptiveConfig.MaxDestinationsPerTenant]
	// at once, and a job naming a new one past it falls back to its type.
	Destination string
	// Message makes units of jobs for the tenant quotas (docs/ARCHITECTURE.md
	// §5): consecutive jobs of a call with the same Group and Message are
	// accepted or refused by a quota together, as a jobs message is. With
	// the zero value, each run of consecutive jobs of one group is a unit.
	Message int
}

// settings are the group settings j asks for.
func (j *Job) settings() contracts.GroupSettings {
	return contracts.GroupSettings{Priority: j.Priority.OrDefault(), BasePriority: j.BasePriority, MaxInFlight: j.MaxInFlight,
		CallbackURL: j.CallbackURL, NotBefore: j.NotBefore, Windows: j.Windows}
}

// EnqueueOutcome says what Enqueue did with one job.
type EnqueueOutcome byte

// Enqueue outcomes.
const (
	// Added: the job is new and now queued.
	Added EnqueueOutcome = 'A'
	// Duplicate: the job already existed in its group; nothing changed.
	Duplicate EnqueueOutcome = 'D'
	// RejectedSealed: the group is sealed and already has its declared
	// number of distinct jobs.
	RejectedSealed EnqueueOutcome = 'S'
	// RejectedEnded: the group was cancelled or completed.
	RejectedEnded EnqueueOutcome = 'C'
	// RejectedActiveGroupsQuota: the job's unit would have created its group,
	// and the tenant already has its most active groups ([QuotaActiveGroups]).
	RejectedActiveGroupsQuota EnqueueOutcome = 'G'
	// RejectedQueuedJobsQuota: the new jobs of the job's unit would have
	// taken the tenant beyond its most queued jobs ([QuotaQueuedJobs]).
	RejectedQueuedJobsQuota EnqueueOutcome = 'Q'
)

// QuotaRefused reports whether a tenant quota refused the job.
func (o EnqueueOutcome) QuotaRefused() bool {
	return o == RejectedActiveGroupsQuota || o == RejectedQueuedJobsQuota
}

func (o EnqueueOutcome) String() string {
	switch o {
	case Added:
		return "added"
	case Duplicate:
		return "duplicate"
	case RejectedSealed:
		return "rejected: group sealed with fewer jobs"
	case RejectedEnded:
		return "rejected: group ended"
	case RejectedActiveGroupsQuota:
		return "rejected: over the tenant's active groups quota"
	case RejectedQueuedJobsQuota:
		return "rejected: over the tenant's queued jobs quota"
	}
	return fmt.Sprintf("EnqueueOutcome(%d)", byte(o))
}

// EnqueueResult is what EnqueueBatch did.
type EnqueueResult struct {
	// Outcomes has one entry per job, in order.
	Outcomes []EnqueueOutcome
	// Created lists the groups this call created.
	Created []contracts.GroupRef
	// Groups has one entry per group of the call, in order of first
	// appearance.
	Groups []EnqueuedGroup
	// Refusals has, when a tenant quota refused jobs, one entry per job, in
	// order: why its unit was refused for the jobs the quotas refused
	// (the jobs of a unit share one), nil for the others. It is nil when no
	// quota refused anything.
	Refusals []*QuotaRefusal
}

// EnqueuedGroup is the state of one group of an Enqueue call after it.
type EnqueuedGroup struct {
	Group contracts.GroupRef
	// Created is true when this call created the group.
	Created bool
	// Settings are the group's effective settings (Priority never ""): the
	// ones it was created with, which later jobs cannot change. Callers
	// compare them with the ones they asked for to report differences.
	// A group that has none yet (it was sealed, cancelled or paused before
	// its first job, and the call added no job) reports the requested ones.
	Settings contracts.GroupSettings
	// Counts are the group's state and counters after the call.
	Counts GroupCounts
	// DestinationsRefused counts the jobs added without their explicit
	// destination: the tenant had its most destinations
	// ([AdaptiveConfig.MaxDestinationsPerTenant]), so they fall back to
	// their type.
	DestinationsRefused int
}

// Enqueue adds one job. Enqueueing a job that already exists in its group
// changes nothing and returns Duplicate.
func (q *Queue) Enqueue(ctx context.Context, job Job) (EnqueueOutcome, error) {
	out, err := q.EnqueueBatch(ctx, []Job{job})
	if err != nil {
		return 0, err
	}
	return out[0], nil
}

// EnqueueBatch adds jobs of any groups: one script call per group (a
// tenant's calls in the order of its jobs: a group's jobs that follow
// another group's of the same tenant make a call of their own), all in one
// pipelined round trip. It returns one outcome per job, in order.
//
// Tenant quotas (docs/ARCHITECTURE.md §5; [Config.TenantMaxQueuedJobs],
// [Config.TenantMaxActiveGroups], [Queue.SetTenantQuota]) judge the new jobs
// of each unit ([Job.Message]) together: a unit that would take its tenant
// beyond its most queued jobs, or that would create a group while the tenant
// has its most active groups, is refused as a whole
// ([RejectedQueuedJobsQuota], [RejectedActiveGroupsQuota]); its duplicates
// stay Duplicate, and nothing else is affected. Duplicates, jobs of an ended
// group and jobs beyond a sealed total never count.
func (q *Queue) EnqueueBatch(ctx context.Context, jobs []Job) ([]EnqueueOutcome, error) {
	r, err := q.EnqueueJobs(ctx, jobs)
	if err != nil {
		return nil, err
	}
	return r.Outcomes, nil
}

// EnqueueJobs is EnqueueBatch reporting also, per group, whether the call
// created it, its effective settings and its counters. A job id is a
// duplicate for the whole life of its group (until the group ends and its
// keys expire), even after the job's own hash expired (Config.JobTTL).
// Groups and job ids must be valid tokens (contracts.GroupRef.Validate).
func (q *Queue) EnqueueJobs(ctx context.Context, jobs []Job) (*EnqueueResult, error) {
	return q.enqueueJobs(ctx, jobs, "", false)
}

// RestoreJobs is EnqueueJobs for jobs that were accepted before and that a
// Redis which came back older may have lost: a replay of SUBMIT
// (docs/ARCHITECTURE.md §6.7). The tenant quotas refuse none of them (they
// were admitted once; a tenant whose finished jobs were rolled back looks
// fuller than it was), but the jobs still count toward them. Everything else
// is as EnqueueJobs: known jobs are duplicates, and a group that ended or
// reached its sealed total still refuses new ones.
func (q *Queue) RestoreJobs(ctx context.Context, jobs []Job) (*EnqueueResult, error) {
	return q.enqueueJobs(ctx, jobs, "", true)
}

// ErrNotCurrent is returned by [Queue.EnqueueJobsIfCurrent] when the log's
// position is not current: nothing was applied.
var ErrNotCurrent = errors.New("redisq: the log's position is not current")

// EnqueueJobsIfCurrent is EnqueueJobs applied only while log's position is
// current ([Position.Current]), checked in the same round trip: a guard
// script reads the position first and the enqueue calls that follow it on
// the same connection apply only if it found the position current
// (docs/ARCHITECTURE.md §6.7). A server that restarts between them closes
// the connection, so they never apply to another server than the one that
// was checked. When the position is not current it returns ErrNotCurrent
// and nothing was applied.
func (q *Queue) EnqueueJobsIfCurrent(ctx context.Context, log string, jobs []Job) (*EnqueueResult, error) {
	if log == "" {
		return nil, errors.New("redisq: enqueue: no log named")
	}
	return q.enqueueJobs(ctx, jobs, log, false)
}

// enqueueJobs is EnqueueJobs, guarded by log's position when log is set,
// and RestoreJobs when restore is set.
func (q *Queue) enqueueJobs(ctx context.Context, jobs []Job, log string, restore bool) (*EnqueueResult, error) {
	if len(jobs) == 0 {
		return &EnqueueResult{}, nil
	}
	if q.sharded() {
		return q.enqueueSharded(ctx, jobs, log, restore)
	}
	// One script call per group, except that a tenant's calls follow the
	// order of its jobs (the tenant quotas judge its units in the order they
	// come): a job of a group after a job of another group of the same tenant
	// starts a new call. Tenants do not affect each other's calls.
	type call struct {
		g     contracts.GroupRef
		idx   []int
		keys  []string
		jobs  []any
		units []int // sizes of the run's units (consecutive jobs with one Message)
		want  contracts.GroupSettings
		sched [4]string // scheduleArgs of want
		// dests are the jobs' explicit destinations ("" = the type), nil
		// while none of the call's jobs names one
		dests []any
	}
	var calls []*call
	last := map[string]*call{} // per tenant, the call its last job went to
	valid := map[contracts.GroupRef]bool{}
	for i := range jobs {
		j := &jobs[i]
		cur := last[j.Group.Tenant]
		if cur == nil || cur.g != j.Group {
			if !valid[j.Group] {
				if err := j.Group.Validate(); err != nil {
					return nil, fmt.Errorf("redisq: enqueue: group %s: %w", j.Group, err)
				}
				valid[j.Group] = true
			}
			if j.MaxInFlight < 0 {
				return nil, fmt.Errorf("redisq: enqueue: group %s: maxInFlight %d: must be >= 0", j.Group, j.MaxInFlight)
			}
			cur = &call{
				g:    j.Group,
				keys: []string{q.keys.GroupMeta(j.Group), q.keys.GroupJobs(j.Group), q.keys.GroupIDs(j.Group)},
				want: j.settings(),
			}
			var err error
			s := &cur.sched
			if s[0], s[1], s[2], s[3], err = scheduleArgs(cur.want, q.clockNow()); err != nil {
				return nil, fmt.Errorf("redisq: enqueue: group %s: %w", j.Group, err)
			}
			calls = append(calls, cur)
			last[j.Group.Tenant] = cur
		}
		if j.ID == "" || strings.IndexByte(j.ID, ':') >= 0 {
			return nil, fmt.Errorf("redisq: enqueue: group %s: job id %q: must be a non-empty token without ':'", j.Group, j.ID)
		}
		if len(cur.idx) == 0 || jobs[cur.idx[len(cur.idx)-1]].Message != j.Message {
			cur.units = append(cur.units, 0)
		}
		cur.units[len(cur.units)-1]++
		cur.idx = append(cur.idx, i)
		cur.keys = append(cur.keys, q.keys.Job(j.Group, j.ID))
		cur.jobs = append(cur.jobs, j.ID, j.Type, j.Payload, j.Trace)
		dest := j.Destination
		if dest == j.Type {
			dest = ""
		}
		if dest != "" {
			if err := contracts.ValidateDestination(dest); err != nil {
				return nil, fmt.Errorf("redisq: enqueue: group %s: job %s: %w", j.Group, j.ID, err)
			}
		}
		if dest != "" && cur.dests == nil {
			cur.dests = make([]any, len(cur.idx)-1, len(cur.idx))
			for k := range cur.dests {
				cur.dests[k] = ""
			}
		}
		if cur.dests != nil {
			cur.dests = append(cur.dests, dest)
		}
	}
	var g *guard
	guardKey := ""
	if log != "" {
		g = q.newGuard(log)
		guardKey = g.key
	}
	mode := ""
	if restore {
		mode = "1"
	}
	replies, err := q.runPipeline(ctx, "enqueue", enqueueScript, len(calls), g, func(i int) ([]string, []any) {
		c := calls[i]
		units := make([]string, len(c.units))
		for k, n := range c.units {
			units[k] = strconv.Itoa(n)
		}
		args := make([]any, 0, 18+len(c.jobs))
		args = append(args, q.keys.Prefix(), c.g.Tenant, c.g.ID, string(c.want.Priority), c.want.BasePriority,
			c.want.MaxInFlight, q.cfg.Alpha, q.now(), q.cfg.TenantMaxQueuedJobs, q.cfg.TenantMaxActiveGroups,
			strings.Join(units, ","), guardKey, mode, c.want.CallbackURL, c.sched[0], c.sched[1], c.sched[2], c.sched[3])
		args = append(args, c.jobs...)
		if c.dests != nil {
			args = append(args, q.cfg.Adaptive.MaxDestinationsPerTenant, ms(q.cfg.Adaptive.ForgetAfter))
			args = append(args, c.dests...)
		}
		return c.keys, args
	})
	if err != nil {
		return nil, err
	}
	res := &EnqueueResult{Outcomes: make([]EnqueueOutcome, len(jobs))}
	out := res.Outcomes
	groupAt := map[contracts.GroupRef]int{} // index in res.Groups
	for ci, c := range calls {
		rep := toList(replies[ci])
		if len(rep) != 10+groupReplyWidth {
			return nil, fmt.Errorf("redisq: enqueue script: %d reply values", len(rep))
		}
		codes := toStr(rep[0])
		if len(codes) != len(c.idx) {
			return nil, fmt.Errorf("redisq: enqueue script: %d outcomes for %d jobs", len(codes), len(c.idx))
		}
		for k, i := range c.idx {
			out[i] = EnqueueOutcome(codes[k])
		}
		if err := res.addRefusals(c.g, c.idx, c.units, toList(rep[5])); err != nil {
			return nil, err
		}
		eg := EnqueuedGroup{
			Group:   c.g,
			Created: toInt(rep[1]) == 1,
			Settings: contracts.GroupSettings{
				Priority: contracts.Priority(toStr(rep[2])).OrDefault(), BasePriority: toInt(rep[3]), MaxInFlight: toInt(rep[4]),
				CallbackURL: toStr(rep[6]),
			},
			Counts:              parseCounts(rep[10:]),
			DestinationsRefused: int(toInt(rep[9])),
		}
		if nb, err := strconv.ParseInt(toStr(rep[7]), 10, 64); err == nil {
			eg.Settings.NotBefore = time.UnixMilli(nb).UTC().Format(time.RFC3339Nano)
		}
		if eg.Settings.Windows, err = decodeWindows(toStr(rep[8])); err != nil {
			return nil, err
		}
		if eg.Created {
			res.Created = append(res.Created, c.g)
		}
		if k, ok := groupAt[c.g]; ok {
			// a later run of the same group: its state after the call
			eg.Created = eg.Created || res.Groups[k].Created
			eg.DestinationsRefused += res.Groups[k].DestinationsRefused
			res.Groups[k] = eg
			continue
		}
		groupAt[c.g] = len(res.Groups)
		res.Groups = append(res.Groups, eg)
	}
	return res, nil
}

// enqueueSharded is enqueueJobs over the shards: each shard's jobs in one
// call of its own (concurrently), the answers merged in the jobs' order.
// With a log, each shard checks its own position: when one is not current
// the call returns ErrNotCurrent, and the shards found current may have
// applied their jobs (a replay or the next try finds them known).
func (q *Queue) enqueueSharded(ctx context.Context, jobs []Job, log string, restore bool) (*EnqueueResult, error) {
	idx := q.shardIndexes(len(jobs), func(i int) string { return jobs[i].Group.Tenant })
	parts := make([]*EnqueueResult, len(idx))
	err := q.onShards(idx, func(s *Queue, ix []int) error {
		r, err := s.enqueueJobs(ctx, pick(jobs, ix), log, restore)
		parts[ShardOf(jobs[ix[0]].Group.Tenant, len(q.shards))] = r
		return err
	})
	if errors.Is(err, ErrNotCurrent) {
		return nil, ErrNotCurrent
	}
	if err != nil {
		return nil, err
	}
	res := &EnqueueResult{Outcomes: make([]EnqueueOutcome, len(jobs))}
	first := map[contracts.GroupRef]int{} // a group's first job
	groups := map[contracts.GroupRef]EnqueuedGroup{}
	created := map[contracts.GroupRef]bool{}
	for si, ix := range idx {
		r := parts[si]
		if r == nil {
			continue
		}
		for k, i := range ix {
			res.Outcomes[i] = r.Outcomes[k]
			if r.Refusals != nil && r.Refusals[k] != nil {
				if res.Refusals == nil {
					res.Refusals = make([]*QuotaRefusal, len(jobs))
				}
				res.Refusals[i] = r.Refusals[k]
			}
			if _, ok := first[jobs[i].Group]; !ok {
				first[jobs[i].Group] = i
			}
		}
		for _, g := range r.Groups {
			groups[g.Group] = g
		}
		for _, g := range r.Created {
			created[g] = true
		}
	}
	order := make([]contracts.GroupRef, 0, len(first))
	for g := range first {
		order = append(order, g)
	}
	sort.Slice(order, func(a, b int) bool { return first[order[a]] < first[order[b]] })
	for _, g := range order {
		res.Groups = append(res.Groups, groups[g])
		if created[g] {
			res.Created = append(res.Created, g)
		}
	}
	return res, nil
}

// addRefusals reads the refusals of one enqueue call (5 values per refused
// unit: its 1-based index, code, limit, count, new jobs) into Refusals.
func (r *EnqueueResult) addRefusals(g contracts.GroupRef, idx, units []int, l []any) error {
	if len(l)%5 != 0 {
		return fmt.Errorf("redisq: enqueue script: %d refusal values", len(l))
	}
	for k := 0; k < len(l); k += 5 {
		u := int(toInt(l[k])) - 1
		if u < 0 || u >= len(units) {
			return fmt.Errorf("redisq: enqueue script: refusal of unit %d of %d", u+1, len(units))
		}
		ref := &QuotaRefusal{Tenant: g.Tenant, Quota: QuotaQueuedJobs, Limit: toInt(l[k+2]), Count: toInt(l[k+3]), Jobs: toInt(l[k+4])}
		if toStr(l[k+1]) == string(RejectedActiveGroupsQuota) {
			ref.Quota = QuotaActiveGroups
		}
		if r.Refusals == nil {
			r.Refusals = make([]*QuotaRefusal, len(r.Outcomes))
		}
		start := 0
		for _, n := range units[:u] {
			start += n
		}
		for _, i := range idx[start : start+units[u]] {
			if r.Outcomes[i].QuotaRefused() {
				r.Refusals[i] = ref
			}
		}
	}
	return nil
}

// pipelineScripts runs n calls of one script in a single round trip.
func (q *Queue) pipelineScripts(ctx context.Context, name string, s *redis.Script, n int, call func(i int) ([]string, []any)) ([]any, error) {
	return q.runPipeline(ctx, name, s, n, nil, call)
}

// guard is a check of a log's position at the head of a pipeline
// (position.lua's guard): the script calls after it apply only if it found
// the position current, and the pipeline's last command deletes its key.
type guard struct {
	log, key string
}

// guardSeq numbers the guards of this process; guardRun tells processes
// apart.
var (
	guardSeq atomic.Uint64
	guardRun = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
)

// newGuard returns a guard of log's position with a key of its own.
func (q *Queue) newGuard(log string) *guard {
	return &guard{log: log, key: q.keys.Guard(guardRun + "-" + strconv.FormatUint(guardSeq.Add(1), 10))}
}

// runPipeline is pipelineScripts, after the position check g when g is not
// nil: when g finds the position not current it returns ErrNotCurrent (the
// calls changed nothing).
func (q *Queue) runPipeline(ctx context.Context, name string, s *redis.Script, n int, g *guard,
	call func(i int) ([]string, []any)) ([]any, error) {
	if n == 1 && g == nil {
		keys, args := call(0)
		v, err := q.run(ctx, name, s, keys, args...)
		return []any{v}, err
	}
	for attempt := 0; ; attempt++ {
		cmds := make([]*redis.Cmd, n)
		var check *redis.Cmd
		start := time.Now()
		_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if g != nil {
				check = positionScript.EvalSha(ctx, p, []string{q.keys.Positions()}, g.log, "guard", g.key)
			}
			for i := 0; i < n; i++ {
				keys, args := call(i)
				cmds[i] = s.EvalSha(ctx, p, keys, args...)
			}
			if g != nil {
				p.Del(ctx, g.key)
			}
			return nil
		})
		if isNoScript(err) && attempt == 0 {
			if err := q.loadScripts(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if q.obs != nil && n == 1 {
			// one call of the script, as run observes it
			q.obs.ObserveLua(name, time.Since(start))
		}
		if check != nil && check.Err() == nil {
			if a, ok := check.Val().([]any); ok && len(a) >= 2 && toInt(a[1]) != 1 {
				return nil, ErrNotCurrent
			}
		}
		if err != nil && (g != nil || !onlySlotMoving(cmds)) {
			return nil, fmt.Errorf("redisq: %s script: %w", name, err)
		}
		out := make([]any, n)
		for i, c := range cmds {
			out[i] = c.Val()
			if slotMoving(c.Err()) {
				// stopped before any write: called again, alone, until its
				// slot has moved
				keys, args := call(i)
				v, err := q.run(ctx, name, s, keys, args...)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
		}
		return out, nil
	}
}

// onlySlotMoving reports whether every call of cmds that failed failed
// because its slot is moving (see slotMoving).
func onlySlotMoving(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !slotMoving(err) {
			return false
		}
	}
	return true
}

// scriptChunk is the most items (results, deliveries) one batched script
// call takes; a larger batch makes several calls in one pipeline.
const scriptChunk = 512

// chunkOf returns chunk c of items, cut in chunks of scriptChunk.
func chunkOf[T any](items []T, c int) []T {
	return items[c*scriptChunk : min((c+1)*scriptChunk, len(items))]
}

// pipelineChunks runs script s once per chunk of items (see chunkOf), all
// in one round trip, call building each chunk's keys and arguments; it
// returns one reply per chunk, in order.
func pipelineChunks[T any](ctx context.Context, q *Queue, name string, s *redis.Script, items []T,
	call func(part []T) ([]string, []any)) ([]any, error) {
	n := (len(items) + scriptChunk - 1) / scriptChunk
	return q.pipelineScripts(ctx, name, s, n, func(c int) ([]string, []any) { return call(chunkOf(items, c)) })
}

// LeasedJob is a job taken out of the queue.
type LeasedJob struct {
	Group   contracts.GroupRef
	ID      string
	Type    string
	Payload []byte
	// Attempt counts how many times the job has been handed out (1 first).
	Attempt int
	// Trace is the W3C traceparent stored with the job ("" = none).
	Trace string
	// Destination is the job's explicit destination ([Job.Destination]);
	// "" means its type.
	Destination string
	// ReadySeq is the READY stream sequence of the job's message, set by
	// the publisher from its PubAck before [Queue.Confirm] (0 = unknown):
	// from then on READY's measurements show the message, and its room
	// reservation ([WithReadySeq]) ends once a measurement does.
	ReadySeq uint64

	// member is the job's "<tenant>:<gid>:<jid>" inflight member as the
	// script that leased it replied it ("" = not read from a reply).
	member string
}

// inflightMember is j's member of the inflight set: the one its lease
// reply carried while it still names j's group and id, else put together.
func (j *LeasedJob) inflightMember() string {
	t, rest, _ := strings.Cut(j.member, ":")
	g, id, _ := strings.Cut(rest, ":")
	if j.member != "" && t == j.Group.Tenant && g == j.Group.ID && id == j.ID {
		return j.member
	}
	return member(j.Group, j.ID)
}

// AdmitResult is the outcome of one Admit call.
type AdmitResult struct {
	// Jobs are the admitted jobs, leased until confirmed.
	Jobs []LeasedJob
	// Parked counts jobs sent to the non-ready queue (seed mode).
	Parked int
	// Wake says when to call again: -1 no job waits; [WakeHeld] (-2) jobs
	// wait but their types have no READY room; 0 at once; > 0 the number of
	// ms until the rate gate opens (the global one, or, when only jobs held
	// by their types' rate limits wait, the first of those types').
	WakeMs int64
	// Started lists groups that moved CREATED -> RUNNING (they are put on
	// the stuck watch list, [Keys.StuckWatch]).
	Started []contracts.GroupRef
	// Drained lists sealed groups whose last queued job left (-> AGGREGATING).
	Drained []contracts.GroupRef
	// DeniedGlobal and DeniedGroup count rate-limit denials (seed mode: jobs
	// parked; paced mode: tenants skipped for a used-up share, and stops at
	// the global limit). Rate shares are per tenant (docs/ARCHITECTURE.md §5):
	// DeniedGroup counts denials by a tenant's share.
	DeniedGlobal, DeniedGroup int
	// NowMs is the time the call ran at (Redis TIME, ms).
	NowMs int64
	// Held counts, per job type without READY room ([WithTypeRooms]), the
	// groups whose next job it held back in this call.
	Held map[string]int
	// RateHeld counts, per job type whose rate limit ([Config.TypeLimits])
	// was used up, the groups whose next job it held back in this call.
	// When only such jobs wait, WakeMs is the time until the first of
	// their types has rate again.
	RateHeld map[string]int
	// ScheduledMs is how long until the first group passed by for its
	// notBefore or sending windows is due to be looked at again (-1: none
	// waits): a caller with nothing else to do calls again by then.
	ScheduledMs int64
	// Stale lists the shards of [WithShardTurns] whose fence is above the
	// turn's epoch: another caller has taken the shard over, and this
	// call admitted nothing from it.
	Stale []int
	// ShardHeld holds, per shard of [WithShardTurns] that held any, its
	// Held and RateHeld counts together: the job types and destinations
	// the shard has jobs of waiting (its demand for them).
	ShardHeld map[int]map[string]int
}

// WakeHeld is the [AdmitResult.WakeMs] of a call that found jobs waiting
// whose types had no READY room: call again when room frees.
const WakeHeld = -2

// AdmitOption configures one Admit call.
type AdmitOption func(*admitOptions)

type admitOptions struct {
	rooms string // '' = no per-type limit
	// roomsOf and other are the rooms of WithTypeRooms (roomsOf nil: none)
	roomsOf map[string]int
	other   int
	seq     string // READY's last sequence when rooms were measured ('' = none)
	// learned, when set, folds learned destination rates into the type
	// limits (WithLearnedRates)
	learned *DestRates
	// log, when set, admits only while that log's position is current
	// (IfCurrent)
	log string
	// epoch is the caller's shard lease epoch (0 = none; WithShardTurns)
	epoch uint64
	// untilMs is the end of the turn's grant period (Redis ms; 0 = none)
	untilMs int64
	// windowCap is the most jobs the call's shard admits in an aligned
	// window (0 = its limit; a grant's turn: the global limit)
	windowCap int
	// turns, when set, are the shards a sharded Admit admits from
	// (WithShardTurns)
	turns []ShardTurn
}

// ShardTurn is one shard's part of a sharded [Queue.Admit]
// ([WithShardTurns]): the shard, the epoch of its caller's lease, and the
// rates of its grant (docs/ARCHITECTURE.md §11.1).
type ShardTurn struct {
	Shard int
	// Epoch is the caller's lease epoch of the shard ([ShardLeases.Hold]):
	// an admission whose epoch is below the shard's fence changes nothing
	// and the shard is listed in [AdmitResult.Stale].
	Epoch uint64
	// Limit is the jobs per [Config.Window] the shard's pacer admits at
	// (a grant as a rate, or the global limit when Max spreads the grant);
	// 0 = the shard's even part of [Config.GlobalLimit]. With a Limit the
	// shard's count of the aligned window is checked against
	// [Config.GlobalLimit], not against it: the grants keep the shards
	// together within the global limit.
	Limit int
	// TypeMax holds, per limited job type or destination (a static
	// [Config.TypeLimits] one, or a learned rate: [Queue.GrantedLimits]),
	// the most jobs of it the shard admits in this call: what is due of
	// the shard's grant of it. Such a name's pacer runs at, and the shard's
	// count of its aligned window is checked against, its whole limit, as
	// for Limit: the grants keep the shards within it. A limited name not in
	// it has the shard's even part of its limit; nil = every one does.
	TypeMax map[string]int
	// Max is the most jobs the shard admits in this call (what is left of
	// its grant); 0 = no bound beyond the call's.
	Max int
	// UntilMs is the end of the grant's period ([Grant.EndMs], Redis time in
	// ms): a call that runs in Redis at or after it admits nothing from the
	// shard, however late it arrives; 0 = none.
	UntilMs int64
}

// WithShardTurns makes a sharded Admit admit from these shards alone, each
// at its turn's grant and with its lease epoch, instead of from every
// shard at its even part of the limits. Without shards it is ignored.
func WithShardTurns(turns ...ShardTurn) AdmitOption {
	return func(o *admitOptions) { o.turns = turns }
}

// IfCurrent makes the call admit only while log's position is current
// ([Position.Current]), checked in the same round trip as for
// [Queue.EnqueueJobsIfCurrent]: when it is not (a Redis that came back
// older, before SUBMIT's replay), the call changes nothing and returns
// [ErrNotCurrent]. What the restored Redis lost (a later notBefore, a
// pause, a cancel) is then applied again before any job is admitted
// against it.
func IfCurrent(log string) AdmitOption {
	return func(o *admitOptions) { o.log = log }
}

// WithReadySeq says that the rooms of [WithTypeRooms] were measured when
// READY's last sequence was seq. The call then completes the measurement
// in Redis, atomically with the hand-out: it takes from each type's room
// the jobs other callers leased for READY and have not published yet, and
// those they published after seq, and it reserves room for the jobs it
// leases until their publish is confirmed ([LeasedJob.ReadySeq],
// [Queue.Confirm]). So any number of fetchers and dispatchers together
// never put more of a type on READY than its room. A measurement older
// than the newest one another caller used for a type gives that type no
// room in this call (reported as [AdmitResult.Held]; measure again).
// Without it, the rooms are taken as they are.
func WithReadySeq(seq uint64) AdmitOption {
	return func(o *admitOptions) { o.seq = strconv.FormatUint(seq, 10) }
}

// WithTypeRooms limits the call to the READY room of each job type: at most
// rooms[t] jobs of type t are admitted, and at most other jobs of each type
// not in rooms (0: such jobs are held, as for a type no live worker
// serves). A group whose next job is held keeps its place and is passed
// by, so a type without room or workers never takes the room of other
// types, or stalls other groups.
func WithTypeRooms(rooms map[string]int, other int) AdmitOption {
	return func(o *admitOptions) {
		o.roomsOf, o.other = rooms, other
		var b strings.Builder
		b.WriteString("*=")
		b.WriteString(strconv.Itoa(max(other, 0)))
		for t, r := range rooms {
			b.WriteByte(',')
			b.WriteString(t)
			b.WriteByte('=')
			b.WriteString(strconv.Itoa(max(r, 0)))
		}
		o.rooms = b.String()
	}
}

// Admit takes up to n jobs in fair order (tenant, then group:
// docs/ARCHITECTURE.md §4) through the configured rate gate (per-tenant
// shares, docs/ARCHITECTURE.md §5) and leases them (status LEASED,
// attempt+1, in the inflight set until Confirm). Paused groups and groups at
// their in-flight limit are passed by and keep their place. With n <= 0 it
// does nothing.
func (q *Queue) Admit(ctx context.Context, n int, opts ...AdmitOption) (*AdmitResult, error) {
	var o admitOptions
	for _, opt := range opts {
		opt(&o)
	}
	if q.sharded() {
		return q.admitSharded(ctx, n, o)
	}
	return q.admit(ctx, n, q.cfg.GlobalLimit, q.limitsWith(o.learned), o)
}

// admitSharded is Admit over the shards. When every turn has a Max and
// together they fit within n and every type's READY room, the shards admit
// at once, each up to its Max (no shard can take what another needs);
// otherwise each shard in turn, from a shard that moves on at every call,
// admits from what the shards before it left of n and of each type's READY
// room. The answers are merged. A shard whose position is not current
// (IfCurrent) admits nothing: the others go on, and the call returns their
// result with ErrNotCurrent, so the caller hands on what they admitted and
// starts the replay.
func (q *Queue) admitSharded(ctx context.Context, n int, o admitOptions) (*AdmitResult, error) {
	res := &AdmitResult{WakeMs: -1, ScheduledMs: -1}
	if n <= 0 {
		return &AdmitResult{}, nil
	}
	turns := o.turns
	if turns == nil {
		turns = make([]ShardTurn, len(q.shards))
		for i := range turns {
			turns[i].Shard = i
		}
	}
	if len(turns) == 0 {
		return res, nil
	}
	for _, t := range turns {
		if t.Shard < 0 || t.Shard >= len(q.shards) {
			return nil, fmt.Errorf("redisq: admit: shard %d of %d", t.Shard, len(q.shards))
		}
	}
	m := mergedAdmit{res: res}
	if turnsFit(turns, n, o) {
		rs := make([]*AdmitResult, len(turns))
		errs := make([]error, len(turns))
		var wg sync.WaitGroup
		for i, t := range turns {
			wg.Go(func() { rs[i], errs[i] = q.admitTurn(ctx, t, t.Max, o) })
		}
		wg.Wait()
		// the answers first, then the failures: what the other shards
		// leased is handed on whatever failed
		for _, answers := range []bool{true, false} {
			for i, t := range turns {
				if (errs[i] == nil) != answers {
					continue
				}
				if err := m.add(t, rs[i], errs[i]); err != nil {
					return nil, err
				}
			}
		}
		return m.result()
	}
	start := int(q.admitTurnNo.Add(1) % uint64(len(turns)))
	for k := range turns {
		if n <= 0 {
			// no room left: the shards not asked may have work
			m.wakeZero = true
			break
		}
		t := turns[(start+k)%len(turns)]
		c := n
		if t.Max > 0 {
			c = min(n, t.Max)
		}
		r, err := q.admitTurn(ctx, t, c, o)
		if err := m.add(t, r, err); err != nil {
			return nil, err
		}
		if m.stop {
			break
		}
		if r != nil && err == nil {
			n -= len(r.Jobs) + r.Parked
			o = o.taken(r.Jobs)
		}
	}
	return m.result()
}

// turnsFit reports whether the shards of turns may admit at once: each has
// a Max, and the Maxes together fit within n and within every type's READY
// room that has any.
func turnsFit(turns []ShardTurn, n int, o admitOptions) bool {
	sum := 0
	for _, t := range turns {
		if t.Max <= 0 {
			return false
		}
		sum += t.Max
	}
	if sum > n {
		return false
	}
	if o.roomsOf != nil {
		if o.other > 0 && sum > o.other {
			return false
		}
		for _, r := range o.roomsOf {
			if r > 0 && sum > r {
				return false
			}
		}
	}
	return true
}

// admitTurn admits up to c jobs from turn t's shard, at its grant.
func (q *Queue) admitTurn(ctx context.Context, t ShardTurn, c int, o admitOptions) (*AdmitResult, error) {
	s := q.shards[t.Shard]
	limit, tl := s.cfg.GlobalLimit, s.limitsWith(o.learned)
	if t.Limit > 0 {
		// the grant paces the shard; the grants, not its window count,
		// keep the shards within the global limit
		limit, o.windowCap = t.Limit, q.cfg.GlobalLimit
	}
	if t.TypeMax != nil {
		tl = q.turnTypeLimits(s, t.TypeMax, o.learned)
	}
	o.epoch, o.untilMs = t.Epoch, t.UntilMs
	return s.admit(ctx, c, limit, tl, o)
}

// turnTypeLimits is the type-limit argument of shard s's turn whose
// grants of limited names are callMax: each such name at its whole limit
// (static or learned) with its most jobs in the call, the others at the
// shard's even part of theirs.
func (q *Queue) turnTypeLimits(s *Queue, callMax map[string]int, r *DestRates) string {
	whole, wholeLearned := q.limitsMap(q.cfg.TypeLimits, r)
	limits, learned := s.limitsMap(s.cfg.TypeLimits, r)
	maxes := make(map[string]int, len(callMax))
	for t, m := range callMax {
		if n, ok := whole[t]; ok {
			limits[t], maxes[t] = n, m
			if learned != nil {
				learned[t] = wholeLearned[t]
			}
		}
	}
	return typeLimitsArgMax(limits, learned, maxes)
}

// mergedAdmit merges the shards' answers to a sharded Admit.
type mergedAdmit struct {
	res                *AdmitResult
	notCurrent         bool
	wakeZero, wakeHeld bool
	stop               bool // a shard failed after others admitted: hand on theirs
}

// add merges shard turn t's answer; it returns an error that ends the
// call (a shard failed before any admitted).
func (m *mergedAdmit) add(t ShardTurn, r *AdmitResult, err error) error {
	res := m.res
	switch {
	case errors.Is(err, ErrNotCurrent):
		m.notCurrent = true
		return nil
	case errors.Is(err, ErrStaleEpoch):
		res.Stale = append(res.Stale, t.Shard)
		return nil
	case err != nil:
		if len(res.Jobs) > 0 {
			// what the other shards leased is handed on; the failed shard
			// is asked again at the next call
			m.wakeZero, m.stop = true, true
			return nil
		}
		return err
	}
	res.Jobs = append(res.Jobs, r.Jobs...)
	res.Parked += r.Parked
	res.Started = append(res.Started, r.Started...)
	res.Drained = append(res.Drained, r.Drained...)
	res.DeniedGlobal += r.DeniedGlobal
	res.DeniedGroup += r.DeniedGroup
	res.NowMs = max(res.NowMs, r.NowMs)
	res.Held = addCounts(res.Held, r.Held)
	res.RateHeld = addCounts(res.RateHeld, r.RateHeld)
	if len(r.Held)+len(r.RateHeld) > 0 {
		if res.ShardHeld == nil {
			res.ShardHeld = map[int]map[string]int{}
		}
		res.ShardHeld[t.Shard] = addCounts(addCounts(res.ShardHeld[t.Shard], r.Held), r.RateHeld)
	}
	switch {
	case r.WakeMs == 0:
		m.wakeZero = true
	case r.WakeMs == WakeHeld:
		m.wakeHeld = true
	case r.WakeMs > 0 && (res.WakeMs < 0 || r.WakeMs < res.WakeMs):
		res.WakeMs = r.WakeMs
	}
	if r.ScheduledMs > 0 && (res.ScheduledMs < 0 || r.ScheduledMs < res.ScheduledMs) {
		res.ScheduledMs = r.ScheduledMs
	}
	return nil
}

// result is the merged answer.
func (m *mergedAdmit) result() (*AdmitResult, error) {
	switch {
	case m.wakeZero:
		m.res.WakeMs = 0
	case m.res.WakeMs < 0 && m.wakeHeld:
		m.res.WakeMs = WakeHeld
	}
	if m.notCurrent {
		return m.res, ErrNotCurrent
	}
	return m.res, nil
}

// addCounts adds b's counts to a (a may be nil).
func addCounts(a, b map[string]int) map[string]int {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = make(map[string]int, len(b))
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}

// taken is o with the rooms of WithTypeRooms less the jobs of jobs, each
// of its type (or of the other types' room).
func (o admitOptions) taken(jobs []LeasedJob) admitOptions {
	if o.roomsOf == nil || len(jobs) == 0 {
		return o
	}
	rooms := make(map[string]int, len(o.roomsOf))
	for t, r := range o.roomsOf {
		rooms[t] = r
	}
	other := o.other
	for _, j := range jobs {
		if _, ok := rooms[j.Type]; ok {
			rooms[j.Type]--
		} else {
			other--
		}
	}
	WithTypeRooms(rooms, other)(&o)
	return o
}

// admit runs admit.lua in the configured mode, with the global limit per
// window globalLimit and the per-type limits typeLimits (limitsWith).
func (q *Queue) admit(ctx context.Context, n, globalLimit int, typeLimits string, o admitOptions) (*AdmitResult, error) {
	if n <= 0 {
		return &AdmitResult{}, nil
	}
	congestion := "1"
	if q.cfg.DisableCongestion {
		congestion = "0"
	}
	keys := append(q.keys.FairQueues(), q.keys.VClock(), q.keys.Inflight(),
		q.keys.ActiveTenants(), q.keys.ActiveSeen(), q.keys.RatePacer(), q.keys.TenantWeights(),
		q.keys.TenantClock(), q.keys.StuckWatch(), q.keys.ScheduleWait())
	args := []any{q.keys.Prefix(), n, q.cfg.Alpha, q.cfg.Mode, globalLimit, ms(q.cfg.Window), ms(q.cfg.Lease), q.now(),
		ms(q.cfg.ActiveStaleAfter), float64(q.cfg.Burst) / 1e6, ms(q.cfg.BaseBackoff), ms(q.cfg.MaxBackoff), congestion,
		o.rooms, typeLimits, o.seq}
	epoch, until, wcap := strconv.FormatUint(o.epoch, 10), strconv.FormatInt(o.untilMs, 10), strconv.Itoa(o.windowCap)
	var v any
	var err error
	if o.log != "" {
		g := q.newGuard(o.log)
		var vs []any
		vs, err = q.runPipeline(ctx, "admit", admitScript, 1, g, func(int) ([]string, []any) {
			return keys, append(args, g.key, epoch, until, wcap)
		})
		if err == nil {
			v = vs[0]
		}
	} else {
		v, err = q.run(ctx, "admit", admitScript, keys, append(args, "", epoch, until, wcap)...)
	}
	if err != nil && strings.Contains(err.Error(), "STALEEPOCH") {
		return nil, fmt.Errorf("%w: admission with epoch %d", ErrStaleEpoch, o.epoch)
	}
	if err != nil {
		return nil, err
	}
	rep := toList(v)
	jobs, err := parseJobs(toList(rep[0]))
	if err != nil {
		return nil, err
	}
	res := &AdmitResult{
		Jobs:         jobs,
		Parked:       int(toInt(rep[1])),
		WakeMs:       toInt(rep[2]),
		Started:      toGroupRefs(rep[3]),
		Drained:      toGroupRefs(rep[4]),
		DeniedGlobal: int(toInt(rep[5])),
		DeniedGroup:  int(toInt(rep[6])),
		NowMs:        toInt(rep[7]),
	}
	res.Held = toCounts(rep[8])
	res.RateHeld = toCounts(rep[9])
	res.ScheduledMs = toInt(rep[10])
	if ao, ok := q.obs.(AdmitObserver); ok && len(res.Jobs) > 0 {
		ao.ObserveAdmit(res.NowMs, len(res.Jobs))
	}
	return res, nil
}

// toCounts reads a flat list name, count, ... (nil when empty).
func toCounts(v any) map[string]int {
	l := toList(v)
	if len(l) < 2 {
		return nil
	}
	out := make(map[string]int, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		out[toStr(l[i])] = int(toInt(l[i+1]))
	}
	return out
}

// toGroupRefs reads a list of group keys ("<tenant>:<gid>").
func toGroupRefs(v any) []contracts.GroupRef {
	l := toList(v)
	out := make([]contracts.GroupRef, 0, len(l))
	for _, x := range l {
		out = append(out, parseGroupKey(toStr(x)))
	}
	return out
}

// FairScore is the score the scripts give a group (docs/ARCHITECTURE.md §4): smaller is
// served first. nowMs is the fair queue's virtual time.
func FairScore(nowMs float64, basePriority, doneJobs, totalJobs int64, alpha float64) float64 {
	rem := totalJobs - doneJobs
	if rem < 1 {
		rem = 1
	}
	return nowMs + float64(basePriority) + alpha*float64(doneJobs)/float64(rem)
}
