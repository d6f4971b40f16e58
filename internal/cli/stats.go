package cli

import (
	"context"
	"time"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Rate is the rate limiter's view of the last full window: jobs admitted
// in it against the limit, both per second. The zero value is no
// admissions and no limit.
type Rate struct {
	// Admitted is the number of jobs admitted in the last full window,
	// per second.
	Admitted float64 `json:"admittedPerSecond"`
	// Limit is the global limit per second (BULKACTION_GLOBAL_RPS per
	// BULKACTION_RATE_LIMIT_WINDOW_MS).
	Limit float64 `json:"limitPerSecond"`
	// ActiveTenants counts the tenants sharing the limit.
	ActiveTenants int64 `json:"activeTenants"`
	// TenantShare is one active tenant's share of the limit (of weight 1),
	// per second.
	TenantShare float64 `json:"tenantSharePerSecond"`
}

// AdmittedRate reads the global admission counter of the last full window.
// The counter exists in the gated admission modes (paced, seed); in the
// ungated mode Admitted reads 0.
func AdmittedRate(ctx context.Context, q *redisq.Queue) (Rate, error) {
	st, err := q.LimiterStatus(ctx, "")
	if err != nil {
		return Rate{}, err
	}
	window := q.Config().Window.Seconds()
	prev, err := q.GlobalAdmitted(ctx, st.Window-1)
	if err != nil {
		return Rate{}, err
	}
	return Rate{
		Admitted: float64(prev) / window, Limit: float64(st.GlobalLimit) / window,
		ActiveTenants: st.Active, TenantShare: float64(st.TenantLimit) / window,
	}, nil
}

// SystemStats is the system-wide picture of `bulkaction stats`. The zero
// value is an empty system.
type SystemStats struct {
	// GroupsPerLevel counts the groups waiting in the fair queue by
	// priority level (high, normal, low).
	GroupsPerLevel map[string]int64 `json:"groupsPerLevel"`
	// WaitingGroups is the sum of GroupsPerLevel.
	WaitingGroups int64 `json:"waitingGroups"`
	// ReadyDepth counts the jobs in the READY stream (admitted, not yet
	// taken by a worker); -1 when NATS was not asked.
	ReadyDepth int64 `json:"readyDepth"`
	// NonReadySize counts the jobs backing off in the non-ready queue.
	NonReadySize int64 `json:"nonReadySize"`
	// InflightSize counts the admitted jobs not yet confirmed on READY.
	InflightSize int64 `json:"inflightSize"`
	// Rate is the admission rate against the global limit.
	Rate Rate `json:"rate"`
	// Congestion is the congestion summary of the active groups.
	Congestion *redisq.CongestionSummary `json:"congestion"`
	// At is when the statistics were read.
	At time.Time `json:"at"`
}

// Stats reads the system-wide statistics from c's queue and, when c has a
// JetStream handle, the READY stream's depth.
func Stats(ctx context.Context, c *Conn) (*SystemStats, error) {
	q := c.Queue
	levels, err := q.GroupsPerLevel(ctx)
	if err != nil {
		return nil, err
	}
	s := &SystemStats{GroupsPerLevel: map[string]int64{}, ReadyDepth: -1}
	for l, n := range levels {
		s.GroupsPerLevel[string(l)] = n
		s.WaitingGroups += n
	}
	sizes, err := q.Sizes(ctx)
	if err != nil {
		return nil, err
	}
	s.NonReadySize, s.InflightSize, s.At = sizes.BackingOff, sizes.Inflight, sizes.At
	if s.Rate, err = AdmittedRate(ctx, q); err != nil {
		return nil, err
	}
	if s.Congestion, err = q.SystemCongestion(ctx); err != nil {
		return nil, err
	}
	s.Congestion.Groups = nil
	if c.JS != nil {
		n, err := handoff.ReadyJobs(ctx, c.JS, c.Names)
		if err != nil {
			return nil, err
		}
		s.ReadyDepth = int64(n)
	}
	return s, nil
}
