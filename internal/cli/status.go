package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ErrGroupNotFound is returned by Status for a group Redis does not know
// (never submitted, or its meta expired after BULKACTION_GROUP_TTL).
var ErrGroupNotFound = errors.New("cli: group not found")

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
	// running, or leased on their way to READY. Jobs = Pending + InFlight +
	// NonReady + Done + Cancelled.
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
	// Rate is jobs done per second: since the group started for a single
	// reading, over the interval between two readings after Since.
	Rate float64
	// ETASeconds is the time left at Rate until every job is done; 0 once
	// the group has ended and -1 when unknown (no rate yet): there is no
	// ETA without a rate.
	ETASeconds float64
	// Congestion is the group's congestion level (NONE when it has none).
	Congestion redisq.CongestionLevel
	// BackoffMs is the backoff the group's next retry would get.
	BackoffMs int64
	// Throttles counts the times a job of the group was sent back to the
	// non-ready queue. Redis drops this figure when the group ends, so an
	// ended group reads 0.
	Throttles int64
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

// ThrottlesPerJob is Throttles divided by the jobs received (0 without jobs).
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

// Status reads a group: its meta hash, queued and backed-off jobs, position
// in the two-level fair queue, congestion state, and its rate and ETA since
// it started. A group Redis does not know is ErrGroupNotFound.
func Status(ctx context.Context, q *redisq.Queue, g contracts.GroupRef) (*GroupStatus, error) {
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
		return nil, fmt.Errorf("cli: status %s: %w", g, err)
	}
	s := &GroupStatus{
		Tenant: g.Tenant, GroupID: g.ID, State: info.State, Priority: info.Priority, BasePriority: info.BasePriority,
		MaxInFlight: info.MaxInFlight,
		Declared:    info.Declared, Jobs: info.Jobs, Done: info.Done,
		Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled,
		Pending: info.Pending, NonReady: cong.NonReadyCount,
		Congestion: cong.Level, BackoffMs: cong.CurrentBackoffMs, Throttles: cong.TotalThrottleCount,
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
	if secs := s.Elapsed().Seconds(); secs > 0 {
		s.Rate = float64(s.Done) / secs
	}
	s.ETASeconds = s.eta()
	return s, nil
}

// Since returns a copy of s whose Rate is measured over the interval from
// prev (an earlier reading of the same group) and whose ETA follows from
// it. With no usable prev (nil, or not earlier) it returns s unchanged.
func (s *GroupStatus) Since(prev *GroupStatus) *GroupStatus {
	if prev == nil || !prev.At.Before(s.At) {
		return s
	}
	c := *s
	c.Rate = float64(s.Done-prev.Done) / s.At.Sub(prev.At).Seconds()
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
	left := s.Target() - s.Done - s.Cancelled
	if left <= 0 {
		return 0
	}
	if s.Rate > 0 {
		return math.Ceil(float64(left) / s.Rate)
	}
	return -1
}

// MarshalJSON writes the meta hash (integer values as JSON numbers) with the
// derived fields beside it: tenant, groupId, state, total (null until
// sealed), jobs, done, succeeded, failed, cancelled, pending, inFlight,
// nonReady, position and tenantPosition (null when not waiting),
// waitingGroups, waitingTenants, rate (jobs/s), etaSeconds (null when
// unknown), congestionLevel, backoffMs, throttles, throttlesPerJob,
// elapsedSeconds and at (RFC 3339).
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
	m["rate"] = round2(s.Rate)
	m["etaSeconds"] = nullIf(s.ETASeconds < 0, s.ETASeconds)
	m["congestionLevel"] = s.Congestion
	m["backoffMs"] = s.BackoffMs
	m["throttles"] = s.Throttles
	m["throttlesPerJob"] = round2(s.ThrottlesPerJob())
	m["elapsedSeconds"] = round2(s.Elapsed().Seconds())
	m["at"] = s.At.UTC().Format(time.RFC3339Nano)
	return json.Marshal(m)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
