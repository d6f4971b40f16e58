package gateway

import (
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// The dashboard API's bodies (docs/ARCHITECTURE.md §10): GET /v1/overview
// and its events, and GET /v1/groups/{groupId}/progress.

// Overview is the body of GET /v1/overview and the data of each event of
// GET /v1/overview/events: the whole system for an admin key, the key's
// tenant (or an admin's ?tenant=) otherwise.
type Overview struct {
	// Scope is "system" or "tenant".
	Scope  string    `json:"scope"`
	Tenant string    `json:"tenant,omitempty"`
	At     time.Time `json:"at"`
	// Rate is the admitted rate against the limit (the tenant's share in
	// the tenant scope).
	Rate RateView `json:"rate"`
	// Ready is READY's depth per job type; null in the tenant scope (READY
	// is shared by every tenant).
	Ready *ReadyView `json:"ready"`
	// BackoffJobs counts the jobs in the backoff (non-ready) queue.
	BackoffJobs int64 `json:"backoffJobs"`
	// ActiveTenants counts the tenants sharing the global limit now (in
	// the tenant scope 1 or 0).
	ActiveTenants int64 `json:"activeTenants"`
	// ActiveGroups counts the groups that exist and have not ended.
	ActiveGroups int64 `json:"activeGroups"`
	// QueuedJobs counts the jobs accepted and not finished in those groups.
	QueuedJobs int64 `json:"queuedJobs"`
	// InFlightJobs counts the jobs of those groups admitted and not
	// finished (handed to READY, running or being recorded).
	InFlightJobs int64 `json:"inFlightJobs"`
	// Workers are the job types workers announced, live or lately gone, or
	// READY has consumers for; in the tenant scope only the types of the
	// tenant's own jobs (redisq TenantTypes), with the type's figures.
	Workers []WorkerTypeView `json:"workers"`
	// DLQ counts the dead letters by reason; null in the tenant scope.
	DLQ *DLQView `json:"dlq"`
	// Destinations are the learned rates per destination over time beside
	// their 429s per second: every destination for an admin key; in the
	// tenant scope only those of the tenant's own jobs (its job types and
	// the explicit destinations its jobs named within
	// BULKACTION_GROUP_TTL). A destination's learned rate is fleet-wide:
	// every tenant that uses it shares it.
	Destinations DestinationsView `json:"destinations"`
}

// DestinationsView is the destinations whose rate the adaptive controller
// learns (docs/ARCHITECTURE.md §5), the most used first.
type DestinationsView struct {
	// Tracked counts the destinations of the scope the gateway knows of
	// (tracked now or sampled within the history); at most
	// OverviewDestinations (10) of them are listed.
	Tracked int `json:"tracked"`
	// Start and WindowMs place each destination's history: one entry per
	// window from Start, the windows of the rate's history.
	Start        time.Time         `json:"start"`
	WindowMs     int64             `json:"windowMs"`
	Destinations []DestinationView `json:"destinations"`
}

// States of a destination ([DestinationView.State]).
const (
	// DestinationLearned: admission holds it to its learned rate.
	DestinationLearned = "learned"
	// DestinationStopped: a Retry-After stops it until StoppedUntil.
	DestinationStopped = "stopped"
	// DestinationNotLimited: no throttle seen (or forgotten): not limited.
	DestinationNotLimited = "not_limited"
)

// DestinationView is one destination's learned rate and 429s.
type DestinationView struct {
	Destination string `json:"destination"`
	// State is "learned", "stopped" or "not_limited".
	State string `json:"state"`
	// LearnedPerSecond is the learned rate now, jobs/s; null when none is
	// learned.
	LearnedPerSecond *float64 `json:"learnedPerSecond"`
	// StoppedUntil is when a Retry-After stop ends; null when not stopped.
	StoppedUntil *time.Time `json:"stoppedUntil"`
	// ThrottledPerSecond is the jobs throttled (429 or 503) per second in
	// the last sampled window.
	ThrottledPerSecond float64 `json:"throttledPerSecond"`
	// Learned is the learned rate at each window (null: none learned, or
	// not sampled); Throttled the jobs throttled per second in it (null:
	// not sampled).
	Learned   []*float64 `json:"learned"`
	Throttled []*float64 `json:"throttled"`
}

// RateView is the admitted rate against the limit, per rate-limit window.
type RateView struct {
	WindowMs int64 `json:"windowMs"`
	// Limit is the jobs a window may admit now.
	Limit int64 `json:"limit"`
	// Admitted is the jobs admitted in the last complete window; null
	// before the first sample.
	Admitted          *int64  `json:"admitted"`
	AdmittedPerSecond float64 `json:"admittedPerSecond"`
	LimitPerSecond    float64 `json:"limitPerSecond"`
	// History has one entry per window from Start, oldest first, up to
	// the last complete window; null where no sample was taken.
	History RateHistory `json:"history"`
}

// RateHistory is the admitted counts of consecutive windows.
type RateHistory struct {
	Start    time.Time `json:"start"`
	WindowMs int64     `json:"windowMs"`
	Admitted []*int64  `json:"admitted"`
	Limit    []*int64  `json:"limit"`
	// Backoff is the backoff queue's size at each sample (the tenant's
	// backed-off jobs are not sampled: null in the tenant scope).
	Backoff []*int64 `json:"backoff"`
}

// ReadyView is READY's depth (jobs waiting or being worked on; a pack counts as its jobs) per type.
type ReadyView struct {
	// Capacity is each type's room on READY (0 = not configured).
	Capacity int          `json:"capacity"`
	Total    int64        `json:"total"`
	Types    []ReadyDepth `json:"types"`
	Error    string       `json:"error,omitempty"`
}

// ReadyDepth is one job type's jobs on READY.
type ReadyDepth struct {
	Type  string `json:"type"`
	Depth int64  `json:"depth"`
}

// WorkerTypeView is one job type served by workers. Worker instances are
// not recorded one by one (each announces its types into one sorted set
// scored by expiry, redisq AnnounceTypes), so the view counts what is
// there: the READY consumers of the type, the jobs they hold and the pull
// requests waiting (roughly one per idle instance).
type WorkerTypeView struct {
	Type string `json:"type"`
	// Live is true while some instance's announcement has not expired.
	Live bool `json:"live"`
	// AnnouncedUntil is when the latest announcement expires.
	AnnouncedUntil *time.Time `json:"announcedUntil"`
	Consumers      int        `json:"consumers"`
	// Running counts the READY messages handed out and not acknowledged.
	Running int `json:"running"`
	// WaitingPulls counts the pull requests waiting for a message.
	WaitingPulls int `json:"waitingPulls"`
}

// DLQView counts the dead letters by reason (DLQ subject).
type DLQView struct {
	Total    int64         `json:"total"`
	ByReason []ReasonCount `json:"byReason"`
	Error    string        `json:"error,omitempty"`
}

// ReasonCount is the dead letters of one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// ProgressView is the body of GET /v1/groups/{groupId}/progress: the
// group's done plus cancelled jobs over time, from the progress samples
// the aggregators keep (redisq.ProgressKeep samples, at least
// redisq.ProgressMinGap apart, while the group runs), and its counts now.
type ProgressView struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	// Samples are oldest first.
	Samples   []ProgressPoint      `json:"samples"`
	State     contracts.GroupState `json:"state"`
	Total     *int64               `json:"total"`
	Jobs      int64                `json:"jobs"`
	Done      int64                `json:"done"`
	Succeeded int64                `json:"succeeded"`
	Failed    int64                `json:"failed"`
	Cancelled int64                `json:"cancelled"`
	At        time.Time            `json:"at"`
}

// ProgressPoint is one progress sample.
type ProgressPoint struct {
	At time.Time `json:"at"`
	// Count is the group's done plus cancelled jobs then.
	Count int64 `json:"count"`
}
