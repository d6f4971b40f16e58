package api

import (
	"encoding/json"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Group is a group's view: the body of GET /v1/groups/{groupId} and an item
// of GET /v1/groups. Counts add up: Jobs = Queued + InFlight + BackingOff +
// Done + Cancelled, and Done = Succeeded + Failed.
type Group struct {
	Tenant       string               `json:"tenant"`
	GroupID      string               `json:"groupId"`
	State        contracts.GroupState `json:"state"`
	Priority     contracts.Priority   `json:"priority"`
	BasePriority int64                `json:"basePriority"`
	MaxInFlight  int64                `json:"maxInFlight"`
	// Total is the sealed total, nil while the group is not sealed.
	Total      *int64     `json:"total"`
	Jobs       int64      `json:"jobs"`
	Queued     int64      `json:"queued"`
	InFlight   int64      `json:"inFlight"`
	BackingOff int64      `json:"backingOff"`
	Done       int64      `json:"done"`
	Succeeded  int64      `json:"succeeded"`
	Failed     int64      `json:"failed"`
	Cancelled  int64      `json:"cancelled"`
	CreatedAt  *time.Time `json:"createdAt"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
	// Status is the live part, in the full view only (GET of one group, or
	// a list with view=full).
	Status *GroupStatus `json:"status,omitempty"`
	// RetryOf is the group this one retries the failed jobs of.
	RetryOf string `json:"retryOf,omitempty"`
	// Retries are the groups made by retry-failed from this one.
	Retries []string `json:"retries,omitempty"`
	// Refused is what the pipeline refused of the group's submissions
	// after accepting them, in the full view only; nil when nothing was.
	Refused *Refusals `json:"refused,omitempty"`
	// Callback is the delivery state of the group's completion callback;
	// absent when it has none.
	Callback *Callback `json:"callback,omitempty"`
	// NotBefore is the group's start-at time, in the full view only;
	// absent when it has none. Status.Waiting says whether it holds the
	// group now (reason scheduled).
	NotBefore *time.Time `json:"notBefore,omitempty"`
	// Windows are the group's sending windows (its own or its tenant's
	// defaults), in the full view only; absent when it has none.
	// Status.Waiting says when one holds it (reason outside_window).
	Windows []contracts.Window `json:"windows,omitempty"`
}

// Ended reports whether the group is COMPLETED or CANCELLED.
func (g *Group) Ended() bool { return g.State.Terminal() }

// GroupStatus is the live part of a group's view: where it stands in the
// fair queue, how fast it goes and what holds it.
type GroupStatus struct {
	// Position is the group's 1-based place among its tenant's groups
	// waiting at its priority level; nil when it is not waiting.
	Position *int64 `json:"position"`
	// TenantPosition is the tenant's 1-based place among the tenants
	// waiting in the fair queue (every tenant of a higher level first);
	// nil when the group is not waiting.
	TenantPosition *int64 `json:"tenantPosition"`
	WaitingGroups  int64  `json:"waitingGroups"`
	WaitingTenants int64  `json:"waitingTenants"`
	// Rate is jobs finished per second over the sliding window of
	// RateWindowSeconds.
	Rate              float64 `json:"rate"`
	RateWindowSeconds float64 `json:"rateWindowSeconds"`
	// ETASeconds is the time left at Rate; nil without a rate (no ETA
	// without a rate) or while an unsealed group has every job done.
	ETASeconds *float64   `json:"etaSeconds"`
	ETA        *time.Time `json:"eta"`
	Congestion string     `json:"congestion"`
	BackoffMs  int64      `json:"backoffMs"`
	// Retries counts the times a job of the group was sent back to the
	// backoff queue, after a retryable error or a rate limit alike.
	Retries int64 `json:"retries"`
	// Throttles counts the retries after a rate limit (a 429 from the
	// job's downstream).
	Throttles int64 `json:"throttles"`
	// Waiting says why the group waits; empty when nothing holds it.
	Waiting []Hold    `json:"waiting"`
	At      time.Time `json:"at"`
}

// Hold is one reason a group waits.
type Hold struct {
	// Reason is a token such as "paused" or "rate_share_used".
	Reason string `json:"reason"`
	// Detail says it in words.
	Detail string `json:"detail"`
	// Until is when the hold lifts, when known.
	Until *time.Time `json:"until,omitempty"`
	// AtLeast says Until is only a lower bound.
	AtLeast bool `json:"atLeast,omitempty"`
}

// GroupList is a page of groups (GET /v1/groups).
type GroupList struct {
	Groups []*Group `json:"groups"`
	// Next is the cursor of the next page; nil at the end.
	Next *string `json:"next"`
}

// Job is one job of a submission (an element of the JSON array or a line of
// the NDJSON body of POST …/jobs).
type Job struct {
	// ID is the job's id, unique in its group.
	ID string `json:"jobId"`
	// Type is the job type.
	Type string `json:"type"`
	// Payload is the job's JSON payload; nil for none.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// SubmitResponse is the body of a 202 answer to POST …/jobs.
type SubmitResponse struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	// Accepted counts the jobs of the request, now stored by JetStream. A
	// job id the group already has is accepted and run once.
	Accepted int64 `json:"accepted"`
	// Messages counts the "jobs" messages they were published in.
	Messages int64 `json:"messages"`
	// Total is the seal the request declared, nil when none.
	Total *int64 `json:"total"`
}

// ControlResponse is the body of a 202 answer to seal, cancel, pause and
// resume.
type ControlResponse struct {
	Tenant  string         `json:"tenant"`
	GroupID string         `json:"groupId"`
	Kind    contracts.Kind `json:"kind"`
	Total   *int64         `json:"total,omitempty"`
	// NotBefore is a schedule's new notBefore.
	NotBefore *time.Time `json:"notBefore,omitempty"`
}

// Failure is one failed job of a group (GET …/failures).
type Failure struct {
	JobID string `json:"jobId"`
	// Type and Payload are empty once the job's record expired.
	Type       string    `json:"type,omitempty"`
	Attempts   int       `json:"attempts"`
	Error      string    `json:"error"`
	FinishedAt time.Time `json:"finishedAt"`
	// Payload is the job's payload; left out of a listing when it is
	// longer than the listing shows (PayloadTruncated).
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBytes is the payload's size in bytes.
	PayloadBytes int `json:"payloadBytes"`
	// PayloadTruncated says a listing holds only the payload's first bytes
	// (PayloadHead); GET …/failures/{jobId} reads it whole.
	PayloadTruncated bool `json:"payloadTruncated,omitempty"`
	// PayloadHead is the first bytes of a truncated payload, as text.
	PayloadHead string `json:"payloadHead,omitempty"`
}

// FailureList is a page of a group's failed jobs, newest first.
type FailureList struct {
	Failures []Failure `json:"failures"`
	Next     *string   `json:"next"`
	// Kept is how many failures the group keeps (the newest 10,000).
	Kept int64 `json:"kept"`
}

// RetryResponse is the body of a 202 answer to retry-failed.
type RetryResponse struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	RetryOf string `json:"retryOf"`
	// Jobs counts the failed jobs resubmitted; the new group is sealed at it.
	Jobs int64 `json:"jobs"`
	// Skipped counts failed jobs whose type and payload had expired
	// (BULKACTION_JOB_TTL) and could not be resubmitted.
	Skipped int64 `json:"skipped"`
}
