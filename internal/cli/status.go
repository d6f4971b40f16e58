package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ErrGroupNotFound is returned by Status for a group Redis does not know
// (never submitted, or its meta expired after BULKACTION_GROUP_TTL).
var ErrGroupNotFound = errors.New("group not found")

// GroupStatus is one reading of a group: its meta hash, and the figures
// derived from it and from the queue. The zero value is a reading of
// nothing.
type GroupStatus struct {
	// Tenant is the group's tenant.
	Tenant string
	// GroupID is the group's id.
	GroupID string
	// State is the group's state (meta "status").
	State contracts.GroupState
	// Priority is the group's level (meta "priorityLevel"); "" means normal.
	Priority contracts.Priority
	// BasePriority is the group's fair-queue offset (meta "basePriority").
	BasePriority int64
	// MaxInFlight is the group's in-flight limit (0 = none).
	MaxInFlight int64
	// Declared is the sealed total, or -1 while the group is not sealed.
	Declared int64
	// Jobs counts the distinct jobs received.
	Jobs int64
	// Done counts the jobs with a result (Succeeded + Failed).
	Done int64
	// Succeeded, Failed and Cancelled count the jobs by outcome.
	Succeeded, Failed, Cancelled int64
	// Pending counts the jobs queued in the fair queue.
	Pending int64
	// NonReady counts the jobs backing off in the non-ready queue.
	NonReady int64
	// InFlight counts the jobs admitted and not yet done: on READY,
	// running, or leased on their way to READY. It is what the other counts
	// leave, so Jobs = Pending + InFlight + NonReady + Done + Cancelled; they
	// are read in one transaction ([redisq.Queue.Group]), so InFlight is
	// exact whenever the counters are.
	InFlight int64
	// Position is the group's 1-based place among its tenant's groups
	// waiting at its level; 0 means the group is not waiting (nothing
	// queued, paused, or ended).
	Position int64
	// TenantPosition is the tenant's 1-based place among the tenants
	// waiting in the fair queue (all of a higher level come first); 0 when
	// the group is not waiting.
	TenantPosition int64
	// Waiting counts the groups waiting in the fair queue, all levels.
	Waiting int64
	// WaitingTenants counts the tenants waiting in the fair queue, summed
	// over the levels.
	WaitingTenants int64
	// Rate is jobs finished (done or cancelled) per second over the last
	// [redisq.ProgressWindow] of the group's progress samples, which the
	// aggregators write about once a second while it runs
	// (docs/ARCHITECTURE.md §8): from the newest sample at least that old
	// (or the oldest one) to this reading. With fewer than two samples, and
	// once the group has ended, it is jobs done per second since the group
	// started. After Since it is measured between two readings.
	Rate float64
	// RateWindow is the span Rate was measured over (0 without a rate).
	RateWindow time.Duration
	// ETASeconds is the time left at Rate until every job is done; 0 once
	// the group has ended and -1 when unknown (no rate yet): there is no
	// ETA without a rate.
	ETASeconds float64
	// Holds say why the group waits, in the order of [redisq.HoldReasons]:
	// paused, at its in-flight limit, its tenant's rate share or the global
	// rate used up, no live worker or no READY room for its next job's
	// type, jobs backing off. None when it runs freely or has ended.
	Holds []Hold
	// ReadyRoomChecked says READY's room was measured (the reading had a
	// NATS connection), so a missing ready_full hold means there is room.
	ReadyRoomChecked bool
	// Congestion is the group's congestion level (NONE when it has none).
	Congestion redisq.CongestionLevel
	// BackoffMs is the backoff the group's next retry would get.
	BackoffMs int64
	// Retries counts the times a job of the group was sent back to the
	// non-ready queue: retries after a rate limit (429) and after a
	// retryable error alike. It stays readable after the group ends (for
	// GROUP_TTL).
	Retries int64
	// Throttles counts the retries that followed a rate limit (a 429 from
	// the job's downstream): 0 when only ordinary errors were retried.
	Throttles int64
	// Refused is what the pipeline refused of the group's submissions
	// after accepting them (redisq.Queue.GroupRefusals); nil when nothing.
	Refused *redisq.Refusals
	// Callback is the delivery state of the group's completion callback
	// (CallbackOf); nil when it has none.
	Callback *api.Callback
	// CreatedAt, StartedAt (first admission) and FinishedAt are zero when
	// not (yet) set.
	CreatedAt, StartedAt, FinishedAt time.Time
	// At is the Redis time of the reading.
	At time.Time
	// Meta is the raw meta hash.
	Meta map[string]string
}

// Target is the number of jobs the group will have: the sealed total, or
// the jobs received so far while it is not sealed.
func (s *GroupStatus) Target() int64 {
	if s.Declared >= 0 {
		return s.Declared
	}
	return s.Jobs
}

// Ended reports whether the group is COMPLETED or CANCELLED.
func (s *GroupStatus) Ended() bool { return s.State.Terminal() }

// Settled reports whether the group has ended with every job accounted
// for: COMPLETED, or CANCELLED once the jobs that were running when it was
// cancelled have finished (succeeded + failed + cancelled = jobs), as its
// final event says ([contracts.GroupEvent.Final]).
func (s *GroupStatus) Settled() bool {
	return s.State == contracts.StateCompleted || s.State == contracts.StateCancelled && s.Succeeded+s.Failed+s.Cancelled >= s.Jobs
}

// Unsettled counts the jobs of a cancelled group that were handed to
// workers before the cancel and have not settled yet: those already
// running finish, the others are counted cancelled (0 once the group has
// settled, and for a group in any other state).
func (s *GroupStatus) Unsettled() int64 {
	if s.State != contracts.StateCancelled {
		return 0
	}
	return max(s.Jobs-s.Succeeded-s.Failed-s.Cancelled, 0)
}

// ThrottlesPerJob is Throttles (rate limits, not other retries) divided by
// the jobs received (0 without jobs).
func (s *GroupStatus) ThrottlesPerJob() float64 {
	if s.Jobs == 0 {
		return 0
	}
	return float64(s.Throttles) / float64(s.Jobs)
}

// Elapsed is the time from the first admission to the end of the group, or
// to the reading while it runs; 0 before it started.
func (s *GroupStatus) Elapsed() time.Duration {
	if s.StartedAt.IsZero() {
		return 0
	}
	end := s.At
	if !s.FinishedAt.IsZero() {
		end = s.FinishedAt
	}
	if end.Before(s.StartedAt) {
		return 0
	}
	return end.Sub(s.StartedAt)
}

// Hold is one reason a group waits ([GroupStatus.Holds]).
type Hold struct {
	redisq.Hold
	// Detail says it in words, e.g. "rate share used until 12:00:01.500
	// (tenant acme: 50 of 50 jobs this window)".
	Detail string
	// Until is when the hold lifts, when known: the end of the rate window,
	// or when the earliest backed-off job is due (no earlier than Until
	// when Hold.AtLeast).
	Until time.Time
}

// MarshalJSON writes {reason, detail, until?, atLeast?}.
func (h Hold) MarshalJSON() ([]byte, error) {
	m := map[string]any{"reason": h.Reason, "detail": h.Detail}
	if !h.Until.IsZero() {
		m["until"] = h.Until.UTC().Format(time.RFC3339Nano)
		if h.AtLeast {
			m["atLeast"] = true
		}
	}
	return json.Marshal(m)
}

// StatusOptions are the optional inputs of [StatusWith].
type StatusOptions struct {
	// Room measures READY's room per job type (a [handoff.Room]'s
	// Measure). Nil, or an error, leaves the ready_full hold unchecked.
	Room func(ctx context.Context) (handoff.Rooms, error)
}

// Status is [StatusWith] without READY's room: everything but the ready_full
// hold, from Redis alone.
func Status(ctx context.Context, q *redisq.Queue, g contracts.GroupRef) (*GroupStatus, error) {
	return StatusWith(ctx, q, g, StatusOptions{})
}

// Status reads a group with READY's room measured when c has a JetStream
// handle ([StatusWith]).
func (c *Conn) Status(ctx context.Context, g contracts.GroupRef) (*GroupStatus, error) {
	var opt StatusOptions
	if c.JS != nil {
		room := handoff.NewRoom(deps.Deps{NC: c.NC, JS: c.JS, Queue: c.Queue, Names: c.Names}, c.Config.ReadyCapacity())
		opt.Room = room.Measure
	}
	return StatusWith(ctx, c.Queue, g, opt)
}

// StatusWith reads a group: its meta hash, queued and backed-off jobs,
// position in the two-level fair queue, congestion state, what holds it
// ([redisq.Queue.Holds]; READY's room with opt.Room), and its rate over
// its recent progress and the ETA at that rate. A group Redis does not
// know is ErrGroupNotFound.
func StatusWith(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, opt StatusOptions) (*GroupStatus, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrGroupNotFound, g)
	}
	cong, err := q.Congestion(ctx, g)
	if err != nil {
		return nil, err
	}
	perLevel, err := q.GroupsPerLevel(ctx)
	if err != nil {
		return nil, err
	}
	level := info.Priority.OrDefault()
	keys := q.Keys()
	pipe := q.Client().Pipeline()
	now := pipe.Time(ctx)
	tenants := make(map[contracts.Priority]*redis.IntCmd, len(contracts.Priorities))
	for _, p := range contracts.Priorities {
		tenants[p] = pipe.ZCard(ctx, keys.FairQueue(p))
	}
	tenantRank := pipe.ZRank(ctx, keys.FairQueue(level), g.Tenant)
	groupRank := pipe.ZRank(ctx, keys.TenantGroups(g.Tenant, level), keys.GroupMember(g))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading group %s: %w", g, err)
	}
	s := &GroupStatus{
		Tenant: g.Tenant, GroupID: g.ID, State: info.State, Priority: info.Priority, BasePriority: info.BasePriority,
		MaxInFlight: info.MaxInFlight,
		Declared:    info.Declared, Jobs: info.Jobs, Done: info.Done,
		Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled,
		Pending: info.Pending, NonReady: info.NonReady,
		Congestion: cong.Level, BackoffMs: cong.CurrentBackoffMs, Retries: cong.TotalThrottleCount, Throttles: info.Throttles,
		CreatedAt: msTime(info.CreatedAtMs), StartedAt: msTime(info.StartedAtMs), FinishedAt: msTime(info.FinishedAtMs),
		At: now.Val(), Meta: info.Meta,
	}
	s.InFlight = max(s.Jobs-s.Done-s.Cancelled-s.Pending-s.NonReady, 0)
	for _, p := range contracts.Priorities {
		s.Waiting += perLevel[p]
		s.WaitingTenants += tenants[p].Val()
	}
	gr, gerr := groupRank.Result()
	tr, terr := tenantRank.Result()
	if gerr == nil && terr == nil && !s.Ended() {
		s.Position = gr + 1
		s.TenantPosition = tr + 1
		for _, p := range contracts.Priorities {
			if p == level {
				break
			}
			s.TenantPosition += tenants[p].Val()
		}
	}
	samples, err := q.Progress(ctx, g)
	if err != nil {
		return nil, err
	}
	s.measureRate(samples)
	s.ETASeconds = s.eta()
	if err := s.readHolds(ctx, q, g, opt); err != nil {
		return nil, err
	}
	if s.Refused, err = q.GroupRefusals(ctx, g); err != nil {
		return nil, err
	}
	if s.Callback, err = CallbackOf(ctx, q, g); err != nil {
		return nil, err
	}
	return s, nil
}

// measureRate sets Rate and RateWindow from the group's progress samples
// (newest first), or since its start (see Rate).
func (s *GroupStatus) measureRate(samples []redisq.ProgressSample) {
	s.Rate, s.RateWindow = 0, 0
	if s.State == contracts.StatePaused {
		return // a paused group makes no progress: no rate, no ETA
	}
	if !s.Ended() && len(samples) >= 2 {
		at := s.At.UnixMilli()
		base := samples[len(samples)-1]
		for _, x := range samples {
			if x.AtMs <= at-redisq.ProgressWindow.Milliseconds() {
				base = x
				break
			}
		}
		if span := at - base.AtMs; span > 0 {
			s.RateWindow = time.Duration(span) * time.Millisecond
			s.Rate = max(float64(s.Done+s.Cancelled-base.Count), 0) / s.RateWindow.Seconds()
			return
		}
	}
	if el := s.Elapsed(); el > 0 {
		s.Rate, s.RateWindow = float64(s.Done)/el.Seconds(), el
	}
}

// readHolds sets Holds and ReadyRoomChecked.
func (s *GroupStatus) readHolds(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, opt StatusOptions) error {
	s.Holds = []Hold{}
	if s.Ended() {
		return nil
	}
	ho := redisq.HoldOptions{NextDue: true}
	if opt.Room != nil {
		if rooms, err := opt.Room(ctx); err == nil {
			ho.Room, ho.RoomOther = rooms.ByType, rooms.Capacity
			if ho.Room == nil {
				ho.Room = map[string]int{}
			}
			s.ReadyRoomChecked = true
		}
	}
	hs, err := q.Holds(ctx, []contracts.GroupRef{g}, ho)
	if err != nil {
		return err
	}
	for _, h := range hs[0] {
		s.Holds = append(s.Holds, s.describe(h))
	}
	if n := s.Missing(); n > 0 && s.Pending+s.InFlight+s.NonReady == 0 {
		s.Holds = append(s.Holds, Hold{Hold: redisq.Hold{Reason: HoldAwaitingJobs, Count: n}, Detail: fmt.Sprintf(
			"sealed at %d but %d distinct jobs received: it waits for %s to be submitted (a repeated job id counts once); "+
				"submit the missing jobs, or cancel the group", s.Declared, s.Jobs, jobsWord(n))})
	}
	return nil
}

// HoldAwaitingJobs holds a sealed group that has run every job it received
// and has fewer distinct jobs than its total: it completes only when the
// missing jobs are submitted (or it is cancelled).
const HoldAwaitingJobs redisq.HoldReason = "awaiting_jobs"

// Missing is the number of jobs a sealed group still waits to receive
// (its total less its distinct jobs); 0 when not sealed or all arrived.
func (s *GroupStatus) Missing() int64 {
	if s.Declared < 0 || s.Ended() {
		return 0
	}
	return max(s.Declared-s.Jobs, 0)
}

func jobsWord(n int64) string {
	if n == 1 {
		return "1 more job"
	}
	return fmt.Sprintf("%d more jobs", n)
}

// describe puts a hold in words.
func (s *GroupStatus) describe(h redisq.Hold) Hold {
	out := Hold{Hold: h}
	if h.UntilMs > 0 {
		out.Until = time.UnixMilli(h.UntilMs)
	}
	clock := func(t time.Time) string { return t.Local().Format("15:04:05.000") }
	switch h.Reason {
	case redisq.HoldPaused:
		out.Detail = "paused until resumed"
	case redisq.HoldInFlightLimit:
		out.Detail = fmt.Sprintf("in-flight limit reached (%d of %d in flight)", h.Count, h.Limit)
	case redisq.HoldRateShare:
		out.Detail = fmt.Sprintf("rate share used until %s (tenant %s: %d of %d jobs this window)", clock(out.Until), h.Tenant, h.Count, h.Limit)
	case redisq.HoldGlobalRate:
		out.Detail = fmt.Sprintf("global rate limit used until %s (%d of %d jobs this window)", clock(out.Until), h.Count, h.Limit)
	case redisq.HoldNoWorker:
		out.Detail = "no live worker for job type " + h.Type
	case redisq.HoldTypeRate:
		out.Detail = fmt.Sprintf("job type %s's rate limit used until %s (%d of %d jobs this window)", h.Type, clock(out.Until), h.Count, h.Limit)
	case redisq.HoldReadyFull:
		out.Detail = "READY has no room for job type " + h.Type
	case redisq.HoldBackingOff:
		jobs := fmt.Sprintf("%d jobs backing off", h.Count)
		if h.Count == 1 {
			jobs = "1 job backing off"
		}
		switch in := out.Until.Sub(s.At).Round(100 * time.Millisecond); {
		case out.Until.IsZero():
			out.Detail = jobs
		case h.AtLeast:
			out.Detail = fmt.Sprintf("%s, next due in %s or later", jobs, max(in, 0))
		case in <= 0:
			out.Detail = jobs + ", next due now"
		default:
			out.Detail = fmt.Sprintf("%s, next due in %s", jobs, in)
		}
	default:
		out.Detail = string(h.Reason)
	}
	return out
}

// WaitingText is the holds' details joined by "; ", or "—" when nothing holds
// the group.
func (s *GroupStatus) WaitingText() string {
	if len(s.Holds) == 0 {
		return "—"
	}
	parts := make([]string, len(s.Holds))
	for i, h := range s.Holds {
		parts[i] = h.Detail
	}
	return strings.Join(parts, "; ")
}

// Since returns a copy of s whose Rate is measured over the interval from
// prev (an earlier reading of the same group) and whose ETA follows from
// it. With no usable prev (nil, or not earlier) it returns s unchanged.
func (s *GroupStatus) Since(prev *GroupStatus) *GroupStatus {
	if prev == nil || !prev.At.Before(s.At) {
		return s
	}
	c := *s
	c.RateWindow = s.At.Sub(prev.At)
	c.Rate = float64(s.Done-prev.Done) / c.RateWindow.Seconds()
	if c.Rate < 0 {
		c.Rate = 0
	}
	c.ETASeconds = c.eta()
	return &c
}

// eta is the time left at the current rate, -1 without a rate.
func (s *GroupStatus) eta() float64 {
	if s.Ended() {
		return 0
	}
	if s.State == contracts.StatePaused {
		return -1 // nothing is admitted until it is resumed
	}
	if s.Missing() > 0 && s.Pending+s.InFlight+s.NonReady == 0 {
		return -1 // every job received is done: the rest must be submitted first
	}
	left := s.Target() - s.Done - s.Cancelled
	if left <= 0 && s.Declared >= 0 {
		return 0 // sealed and every job settled: about to complete
	}
	if left <= 0 {
		return -1 // not sealed: more jobs may come, so there is no ETA
	}
	if s.Rate > 0 {
		return math.Ceil(float64(left) / s.Rate)
	}
	return -1
}

// MarshalJSON writes the meta hash (integer values as JSON numbers) with the
// derived fields beside it: tenant, groupId, state, total (null until
// sealed), jobs, done, succeeded, failed, cancelled, pending, inFlight,
// nonReady (jobs = pending + inFlight + nonReady + done + cancelled),
// position and tenantPosition (null when not waiting), waitingGroups,
// waitingTenants, waiting (what holds the group: [{reason, detail,
// until?}], empty when nothing does), readyRoomChecked, rate (jobs/s),
// rateWindowSeconds (what rate was measured over), etaSeconds (null when
// unknown), congestionLevel, backoffMs, retries (every retry, after a 429
// or a retryable error), throttles (the retries after a 429), throttlesPerJob,
// elapsedSeconds, at (RFC 3339) and, when the pipeline refused some of its
// submissions, refused ({messages, jobs, lastReason, lastError, lastAt,
// byReason}).
func (s *GroupStatus) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(s.Meta)+20)
	for k, v := range s.Meta {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		} else {
			m[k] = v
		}
	}
	nullIf := func(cond bool, v any) any {
		if cond {
			return nil
		}
		return v
	}
	m["tenant"] = s.Tenant
	m["groupId"] = s.GroupID
	m["state"] = s.State
	m["total"] = nullIf(s.Declared < 0, s.Declared)
	m["jobs"] = s.Jobs
	m["done"] = s.Done
	m["succeeded"] = s.Succeeded
	m["failed"] = s.Failed
	m["cancelled"] = s.Cancelled
	m["pending"] = s.Pending
	m["inFlight"] = s.InFlight
	m["nonReady"] = s.NonReady
	m["position"] = nullIf(s.Position == 0, s.Position)
	m["tenantPosition"] = nullIf(s.TenantPosition == 0, s.TenantPosition)
	m["waitingGroups"] = s.Waiting
	m["waitingTenants"] = s.WaitingTenants
	holds := s.Holds
	if holds == nil {
		holds = []Hold{}
	}
	m["waiting"] = holds
	m["readyRoomChecked"] = s.ReadyRoomChecked
	m["rate"] = round2(s.Rate)
	m["rateWindowSeconds"] = round2(s.RateWindow.Seconds())
	m["etaSeconds"] = nullIf(s.ETASeconds < 0, s.ETASeconds)
	m["congestionLevel"] = s.Congestion
	m["backoffMs"] = s.BackoffMs
	m["throttles"] = s.Throttles
	m["retries"] = s.Retries
	m["throttlesPerJob"] = round2(s.ThrottlesPerJob())
	m["elapsedSeconds"] = round2(s.Elapsed().Seconds())
	m["at"] = s.At.UTC().Format(time.RFC3339Nano)
	if s.Refused != nil {
		m["refused"] = refusedJSON(s.Refused)
	}
	if s.Callback != nil {
		m["callback"] = s.Callback
	}
	return json.Marshal(m)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
