package status

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ErrNotFound is returned by [Read] for a group Redis does not know
// (never submitted, or its meta expired after BULKACTION_GROUP_TTL).
var ErrNotFound = errors.New("group not found")

// Group is one reading of a group: its counts, its place in the fair
// queue, its rate and what holds it. Its JSON is its API view ([Group.View]).
// The zero value is a reading of nothing.
type Group struct {
	// Tenant is the group's tenant.
	Tenant string
	// GroupID is the group's id.
	GroupID string
	// State is the group's state.
	State contracts.GroupState
	// Priority is the group's level; "" means normal.
	Priority contracts.Priority
	// BasePriority is the group's fair-queue offset.
	BasePriority int64
	// MaxInFlight is the group's in-flight limit (0 = none).
	MaxInFlight int64
	// Total is the sealed total, or -1 while the group is not sealed.
	Total int64
	// Jobs counts the distinct jobs received.
	Jobs int64
	// Done counts the jobs with a result (Succeeded + Failed).
	Done int64
	// Succeeded, Failed and Cancelled count the jobs by outcome.
	Succeeded, Failed, Cancelled int64
	// Queued counts the jobs queued in the fair queue.
	Queued int64
	// BackingOff counts the jobs backing off in the non-ready queue.
	BackingOff int64
	// InFlight counts the jobs admitted and not yet done: on READY,
	// running, or leased on their way to READY. It is what the other counts
	// leave, so Jobs = Queued + InFlight + BackingOff + Done + Cancelled;
	// they are read in one transaction ([redisq.Queue.Group]), so InFlight
	// is exact whenever the counters are.
	InFlight int64
	// Position is the group's 1-based place among its tenant's groups
	// waiting at its level; 0 means the group is not waiting (nothing
	// queued, paused, or ended).
	Position int64
	// TenantPosition is the tenant's 1-based place among the tenants
	// waiting in the fair queue (all of a higher level come first); 0 when
	// the group is not waiting.
	TenantPosition int64
	// WaitingGroups counts the groups waiting in the fair queue, all levels.
	WaitingGroups int64
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
	// Holds say why the group waits (the view's "waiting"), in the order
	// of [redisq.HoldReasons], then [HoldAwaitingJobs]. Empty when it runs
	// freely or has ended.
	Holds []Hold
	// ReadyRoomChecked says READY's room was measured ([Options.Room]), so
	// a missing ready_full hold means there is room.
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
	// Schedule is the group's notBefore and sending windows, and whether
	// and until when they hold it ([redisq.Queue.GroupSchedule]).
	Schedule redisq.Schedule
	// Callback is the delivery state of the group's completion callback
	// ([CallbackOf]); nil when it has none.
	Callback *api.Callback
	// RetryOf is the group this one retries the failed jobs of ("" =
	// none); RetryGroups are the groups made by retry-failed from this one.
	RetryOf     string
	RetryGroups []string
	// CreatedAt, StartedAt (first admission) and FinishedAt are zero when
	// not (yet) set.
	CreatedAt, StartedAt, FinishedAt time.Time
	// At is the Redis time of the reading.
	At time.Time
}

// Target is the number of jobs the group will have: the sealed total, or
// the jobs received so far while it is not sealed.
func (s *Group) Target() int64 {
	if s.Total >= 0 {
		return s.Total
	}
	return s.Jobs
}

// Ended reports whether the group is COMPLETED or CANCELLED.
func (s *Group) Ended() bool { return s.State.Terminal() }

// Settled reports whether the group has ended with every job accounted
// for: COMPLETED, or CANCELLED once the jobs that were running when it was
// cancelled have finished (succeeded + failed + cancelled = jobs), as its
// final event says ([contracts.GroupEvent.Final]).
func (s *Group) Settled() bool {
	return s.State == contracts.StateCompleted || s.State == contracts.StateCancelled && s.Succeeded+s.Failed+s.Cancelled >= s.Jobs
}

// Unsettled counts the jobs of a cancelled group that were handed to
// workers before the cancel and have not settled yet: those already
// running finish, the others are counted cancelled (0 once the group has
// settled, and for a group in any other state).
func (s *Group) Unsettled() int64 {
	if s.State != contracts.StateCancelled {
		return 0
	}
	return max(s.Jobs-s.Succeeded-s.Failed-s.Cancelled, 0)
}

// ThrottlesPerJob is Throttles (rate limits, not other retries) divided by
// the jobs received (0 without jobs).
func (s *Group) ThrottlesPerJob() float64 {
	if s.Jobs == 0 {
		return 0
	}
	return float64(s.Throttles) / float64(s.Jobs)
}

// Elapsed is the time from the first admission to the end of the group, or
// to the reading while it runs; 0 before it started.
func (s *Group) Elapsed() time.Duration {
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

// Missing is the number of jobs a sealed group still waits to receive
// (its total less its distinct jobs); 0 when not sealed or all arrived.
func (s *Group) Missing() int64 {
	if s.Total < 0 || s.Ended() {
		return 0
	}
	return max(s.Total-s.Jobs, 0)
}

// Hold is one reason a group waits ([Group.Holds]).
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

// HoldAwaitingJobs holds a sealed group that has run every job it received
// and has fewer distinct jobs than its total: it completes only when the
// missing jobs are submitted (or it is cancelled).
const HoldAwaitingJobs redisq.HoldReason = "awaiting_jobs"

// Options are the optional inputs of [Read].
type Options struct {
	// Room measures READY's free room per job type (byType) and the room
	// of a type not in it (other). Nil, or an error, leaves the ready_full
	// hold unchecked.
	Room func(ctx context.Context) (byType map[string]int, other int, err error)
}

// Read reads a group: its meta hash, queued and backed-off jobs, position
// in the two-level fair queue, congestion state, what holds it
// ([redisq.Queue.Holds]; READY's room with opt.Room), its rate over its
// recent progress and the ETA at that rate, its refusals, callback and
// retry links. A group Redis does not know is ErrNotFound.
func Read(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, opt Options) (*Group, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, g)
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
	place, err := q.FairPlace(ctx, g, level)
	if err != nil {
		return nil, err
	}
	s := &Group{
		Tenant: g.Tenant, GroupID: g.ID, State: info.State, Priority: info.Priority, BasePriority: info.BasePriority,
		MaxInFlight: info.MaxInFlight,
		Total:       info.Declared, Jobs: info.Jobs, Done: info.Done,
		Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled,
		Queued: info.Pending, BackingOff: info.NonReady,
		Congestion: cong.Level, BackoffMs: cong.CurrentBackoffMs, Retries: cong.TotalThrottleCount, Throttles: info.Throttles,
		CreatedAt: msTime(info.CreatedAtMs), StartedAt: msTime(info.StartedAtMs), FinishedAt: msTime(info.FinishedAtMs),
		At: place.At,
	}
	s.InFlight = max(s.Jobs-s.Done-s.Cancelled-s.Queued-s.BackingOff, 0)
	for _, p := range contracts.Priorities {
		s.WaitingGroups += perLevel[p]
		s.WaitingTenants += place.Tenants[p]
	}
	if place.GroupRank >= 0 && !s.Ended() {
		s.Position = place.GroupRank + 1
		s.TenantPosition = place.TenantRank + 1
		for _, p := range contracts.Priorities {
			if p == level {
				break
			}
			s.TenantPosition += place.Tenants[p]
		}
	}
	samples, err := q.Progress(ctx, g)
	if err != nil {
		return nil, err
	}
	s.measureRate(samples)
	if s.Schedule, err = q.GroupSchedule(ctx, g); err != nil {
		return nil, err
	}
	if s.Position == 0 && !s.Schedule.HeldUntil.IsZero() && !s.Ended() {
		// passed by for its schedule, it keeps its place: its position is
		// the one it takes back then
		if s.Position, err = q.KeptPosition(ctx, g, level); err != nil {
			return nil, err
		}
		if s.Position > 0 && place.TenantRank >= 0 {
			s.TenantPosition = place.TenantRank + 1
			for _, p := range contracts.Priorities {
				if p == level {
					break
				}
				s.TenantPosition += place.Tenants[p]
			}
		}
	}
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
	if s.RetryOf, s.RetryGroups, err = q.Links(ctx, g); err != nil {
		return nil, err
	}
	return s, nil
}

// measureRate sets Rate and RateWindow from the group's progress samples
// (newest first), or since its start (see Rate).
func (s *Group) measureRate(samples []redisq.ProgressSample) {
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
func (s *Group) readHolds(ctx context.Context, q *redisq.Queue, g contracts.GroupRef, opt Options) error {
	s.Holds = []Hold{}
	if s.Ended() {
		return nil
	}
	ho := redisq.HoldOptions{NextDue: true}
	if opt.Room != nil {
		if byType, other, err := opt.Room(ctx); err == nil {
			ho.Room, ho.RoomOther = byType, other
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
	if n := s.Missing(); n > 0 && s.Queued+s.InFlight+s.BackingOff == 0 {
		s.Holds = append(s.Holds, Hold{Hold: redisq.Hold{Reason: HoldAwaitingJobs, Count: n}, Detail: fmt.Sprintf(
			"sealed at %d but %d distinct jobs received: it waits for %s to be submitted (a repeated job id counts once); "+
				"submit the missing jobs, or cancel the group", s.Total, s.Jobs, jobsWord(n))})
	}
	return nil
}

func jobsWord(n int64) string {
	if n == 1 {
		return "1 more job"
	}
	return fmt.Sprintf("%d more jobs", n)
}

// describe puts a hold in words.
func (s *Group) describe(h redisq.Hold) Hold {
	out := Hold{Hold: h}
	if h.UntilMs > 0 {
		out.Until = time.UnixMilli(h.UntilMs)
	}
	clock := func(t time.Time) string { return t.Local().Format("15:04:05.000") }
	switch h.Reason {
	case redisq.HoldPaused:
		out.Detail = "paused until resumed"
	case redisq.HoldScheduled:
		out.Detail = "scheduled until " + ScheduleTime(out.Until)
	case redisq.HoldOutsideWindow:
		out.Detail = "outside window until " + ScheduleTime(out.Until)
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
	case redisq.HoldDestinationRate:
		if h.Limit == 0 && h.Count == 0 {
			out.Detail = fmt.Sprintf("destination %s stopped by its Retry-After until %s (learned %.0f/s)", h.Type, clock(out.Until), h.Rate)
		} else {
			out.Detail = fmt.Sprintf("waiting: destination_rate, learned %.0f/s (%s: %d of %d jobs this window, until %s)",
				h.Rate, h.Type, h.Count, h.Limit, clock(out.Until))
		}
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

// ScheduleTime writes a time a schedule names: RFC 3339 in the local
// time zone, to the second.
func ScheduleTime(t time.Time) string {
	return t.Local().Format(time.RFC3339)
}

// ScheduleText describes a group's schedule for the status view: its
// notBefore and windows, "—" when it has neither.
func (s *Group) ScheduleText() string {
	var parts []string
	if !s.Schedule.NotBefore.IsZero() {
		parts = append(parts, "not before "+ScheduleTime(s.Schedule.NotBefore))
	}
	if len(s.Schedule.Windows) > 0 {
		ws := make([]string, len(s.Schedule.Windows))
		for i, w := range s.Schedule.Windows {
			ws[i] = w.String()
		}
		parts = append(parts, "windows "+strings.Join(ws, "; "))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// WaitingText is the holds' details joined by "; ", or "—" when nothing holds
// the group.
func (s *Group) WaitingText() string {
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
func (s *Group) Since(prev *Group) *Group {
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
func (s *Group) eta() float64 {
	if s.Ended() {
		return 0
	}
	if s.State == contracts.StatePaused {
		return -1 // nothing is admitted until it is resumed
	}
	if s.Missing() > 0 && s.Queued+s.InFlight+s.BackingOff == 0 {
		return -1 // every job received is done: the rest must be submitted first
	}
	left := s.Target() - s.Done - s.Cancelled
	if left <= 0 && s.Total >= 0 {
		return 0 // sealed and every job settled: about to complete
	}
	if left <= 0 {
		return -1 // not sealed: more jobs may come, so there is no ETA
	}
	// held by its schedule, it counts from when it may start again
	wait := 0.0
	if u := s.Schedule.HeldUntil; !u.IsZero() && u.After(s.At) {
		wait = u.Sub(s.At).Seconds()
	}
	if s.Rate > 0 {
		return math.Ceil(wait + float64(left)/s.Rate)
	}
	return -1
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
