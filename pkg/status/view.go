package status

import (
	"encoding/json"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// View is the group's view on the wire: the body of GET
// /v1/groups/{groupId} and an item of GET /v1/groups?view=full.
func (s *Group) View() *api.Group {
	v := &api.Group{
		Tenant: s.Tenant, GroupID: s.GroupID, State: s.State, Priority: s.Priority.OrDefault(), BasePriority: s.BasePriority,
		MaxInFlight: s.MaxInFlight, Jobs: s.Jobs, Queued: s.Queued, InFlight: s.InFlight, BackingOff: s.BackingOff,
		Done: s.Done, Succeeded: s.Succeeded, Failed: s.Failed, Cancelled: s.Cancelled,
		CreatedAt: timePtr(s.CreatedAt), StartedAt: timePtr(s.StartedAt), FinishedAt: timePtr(s.FinishedAt),
		RetryOf: s.RetryOf, Retries: s.RetryGroups, Refused: RefusalsView(s.Refused), Callback: s.Callback,
	}
	if s.Total >= 0 {
		t := s.Total
		v.Total = &t
	}
	if nb := s.Schedule.NotBefore; !nb.IsZero() {
		u := nb.UTC()
		v.NotBefore = &u
	}
	v.Windows = s.Schedule.Windows
	st := &api.GroupStatus{
		WaitingGroups: s.WaitingGroups, WaitingTenants: s.WaitingTenants,
		Rate: Round2(s.Rate), RateWindowSeconds: Round2(s.RateWindow.Seconds()),
		Congestion: string(s.Congestion), BackoffMs: s.BackoffMs, Retries: s.Retries, Throttles: s.Throttles,
		Waiting: make([]api.Hold, 0, len(s.Holds)), At: s.At.UTC(),
	}
	for _, h := range s.Holds {
		ah := api.Hold{Reason: string(h.Reason), Detail: h.Detail}
		if !h.Until.IsZero() {
			u := h.Until.UTC()
			ah.Until, ah.AtLeast = &u, h.AtLeast
		}
		st.Waiting = append(st.Waiting, ah)
	}
	if s.Position > 0 {
		p, tp := s.Position, s.TenantPosition
		st.Position, st.TenantPosition = &p, &tp
	}
	if s.ETASeconds >= 0 {
		e := s.ETASeconds
		at := s.At.Add(time.Duration(e * float64(time.Second))).UTC()
		st.ETASeconds, st.ETA = &e, &at
	}
	v.Status = st
	return v
}

// MarshalJSON writes the group's view ([Group.View]): `bulkaction status
// --json` prints what GET /v1/groups/{groupId} answers.
func (s *Group) MarshalJSON() ([]byte, error) { return json.Marshal(s.View()) }

// Summary is the summary view of a group (an item of GET /v1/groups without
// view=full): its counts without the live status.
func Summary(info *redisq.GroupInfo) *api.Group {
	v := &api.Group{
		Tenant: info.Group.Tenant, GroupID: info.Group.ID, State: info.State, Priority: info.Priority.OrDefault(),
		BasePriority: info.BasePriority, MaxInFlight: info.MaxInFlight,
		Jobs: info.Jobs, Queued: info.Pending, BackingOff: info.NonReady, Done: info.Done,
		Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled,
		CreatedAt: timePtr(msTime(info.CreatedAtMs)), StartedAt: timePtr(msTime(info.StartedAtMs)), FinishedAt: timePtr(msTime(info.FinishedAtMs)),
	}
	if info.Declared >= 0 {
		t := info.Declared
		v.Total = &t
	}
	v.InFlight = max(v.Jobs-v.Done-v.Cancelled-v.Queued-v.BackingOff, 0)
	return v
}

// FromView is the status a view describes ([Group.View] read back), for a
// client that reads a group over the HTTP API. A summary view (no status)
// reads as taken now, with no position, rate or ETA.
func FromView(g *api.Group) *Group {
	s := &Group{
		Tenant: g.Tenant, GroupID: g.GroupID, State: g.State, Priority: g.Priority, BasePriority: g.BasePriority,
		MaxInFlight: g.MaxInFlight, Total: -1, Jobs: g.Jobs, Done: g.Done,
		Succeeded: g.Succeeded, Failed: g.Failed, Cancelled: g.Cancelled,
		Queued: g.Queued, BackingOff: g.BackingOff, InFlight: g.InFlight, ETASeconds: -1,
		Congestion: redisq.CongestionNone, Refused: RefusalsFrom(g.Refused), Callback: g.Callback,
		RetryOf: g.RetryOf, RetryGroups: g.Retries,
	}
	if g.Total != nil {
		s.Total = *g.Total
	}
	if g.NotBefore != nil {
		s.Schedule.NotBefore = *g.NotBefore
	}
	s.Schedule.Windows = g.Windows
	for _, t := range []struct {
		from *time.Time
		to   *time.Time
	}{{g.CreatedAt, &s.CreatedAt}, {g.StartedAt, &s.StartedAt}, {g.FinishedAt, &s.FinishedAt}} {
		if t.from != nil {
			*t.to = *t.from
		}
	}
	st := g.Status
	if st == nil {
		s.At = time.Now()
		return s
	}
	if st.Position != nil && st.TenantPosition != nil {
		s.Position, s.TenantPosition = *st.Position, *st.TenantPosition
	}
	s.WaitingGroups, s.WaitingTenants = st.WaitingGroups, st.WaitingTenants
	s.Rate, s.RateWindow = st.Rate, time.Duration(st.RateWindowSeconds*float64(time.Second))
	if st.ETASeconds != nil {
		s.ETASeconds = *st.ETASeconds
	}
	if s.Ended() {
		s.ETASeconds = 0
	}
	if st.Congestion != "" {
		s.Congestion = redisq.CongestionLevel(st.Congestion)
	}
	s.BackoffMs, s.Retries, s.Throttles, s.At = st.BackoffMs, st.Retries, st.Throttles, st.At
	s.Holds = make([]Hold, 0, len(st.Waiting))
	for _, h := range st.Waiting {
		ch := Hold{Hold: redisq.Hold{Reason: redisq.HoldReason(h.Reason), AtLeast: h.AtLeast}, Detail: h.Detail}
		if h.Until != nil {
			ch.Until = *h.Until
		}
		s.Holds = append(s.Holds, ch)
	}
	return s
}

// RefusalsView is the API's view of a group's refusals; nil for nil.
func RefusalsView(r *redisq.Refusals) *api.Refusals {
	if r == nil {
		return nil
	}
	out := &api.Refusals{Messages: r.Messages, Jobs: r.Jobs, LastReason: r.Last.Reason, LastError: r.Last.Error,
		LastAt: r.Last.At, ByReason: make([]api.RefusalCount, 0, len(r.ByReason)), Recent: make([]api.Refusal, 0, len(r.Recent))}
	for _, c := range r.ByReason {
		out.ByReason = append(out.ByReason, api.RefusalCount{Reason: c.Reason, Messages: c.Messages, Jobs: c.Jobs})
	}
	for _, e := range r.Recent {
		out.Recent = append(out.Recent, api.Refusal{Reason: e.Reason, Error: e.Error, Jobs: e.Jobs, MessageID: e.MsgID, At: e.At})
	}
	return out
}

// RefusalsFrom is a group's refusals as the HTTP API gives them
// ([RefusalsView] read back); nil for nil.
func RefusalsFrom(a *api.Refusals) *redisq.Refusals {
	if a == nil {
		return nil
	}
	r := &redisq.Refusals{Messages: a.Messages, Jobs: a.Jobs,
		Last: redisq.Refusal{Reason: a.LastReason, Error: a.LastError, At: a.LastAt}}
	for _, c := range a.ByReason {
		r.ByReason = append(r.ByReason, redisq.RefusalCount{Reason: c.Reason, Messages: c.Messages, Jobs: c.Jobs})
	}
	for _, e := range a.Recent {
		r.Recent = append(r.Recent, redisq.Refusal{Reason: e.Reason, Error: e.Error, Jobs: e.Jobs, MsgID: e.MessageID, At: e.At})
	}
	if len(r.Recent) > 0 {
		r.Last.MsgID, r.Last.Jobs = r.Recent[0].MsgID, r.Recent[0].Jobs
	}
	return r
}

// Round2 rounds a non-negative figure to two decimals, as the views show
// rates and durations.
func Round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
