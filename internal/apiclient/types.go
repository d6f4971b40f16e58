package apiclient

import (
	"encoding/json"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Group is a group's view (GET /v1/groups/{groupId}, and an item of GET
// /v1/groups). Counts add up: Jobs = Queued + InFlight + BackingOff + Done
// + Cancelled, and Done = Succeeded + Failed.
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
	// Status is the live part, in the full view only (one group, or a list
	// with Full).
	Status *GroupStatus `json:"status,omitempty"`
	// RetryOf is the group this one retries the failed jobs of.
	RetryOf string `json:"retryOf,omitempty"`
	// Retries are the groups made by retry-failed from this one.
	Retries []string `json:"retries,omitempty"`
}

// Ended reports whether the group is COMPLETED or CANCELLED.
func (g *Group) Ended() bool { return g.State.Terminal() }

// GroupStatus is the live part of a group's view.
type GroupStatus struct {
	// Position is the group's 1-based place among its tenant's waiting
	// groups at its level; nil when it is not waiting.
	Position *int64 `json:"position"`
	// TenantPosition is the tenant's 1-based place among the waiting
	// tenants; nil when the group is not waiting.
	TenantPosition *int64 `json:"tenantPosition"`
	WaitingGroups  int64  `json:"waitingGroups"`
	WaitingTenants int64  `json:"waitingTenants"`
	// Rate is jobs finished per second over RateWindowSeconds.
	Rate              float64 `json:"rate"`
	RateWindowSeconds float64 `json:"rateWindowSeconds"`
	// ETASeconds is the time left at Rate; nil without a rate.
	ETASeconds *float64   `json:"etaSeconds"`
	ETA        *time.Time `json:"eta"`
	Congestion string     `json:"congestion"`
	BackoffMs  int64      `json:"backoffMs"`
	Throttles  int64      `json:"throttles"`
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

// GroupList is a page of groups.
type GroupList struct {
	Groups []*Group `json:"groups"`
	// Next is the cursor of the next page; nil at the end.
	Next *string `json:"next"`
}

// SubmitResult is the answer to a submission (202).
type SubmitResult struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	// Accepted counts the jobs of the request, now stored.
	Accepted int64 `json:"accepted"`
	// Messages counts the messages they were published in.
	Messages int64 `json:"messages"`
	// Total is the seal the request declared, nil when none.
	Total *int64 `json:"total"`
}

// ControlResult is the answer to seal, cancel, pause and resume (202).
type ControlResult struct {
	Tenant  string         `json:"tenant"`
	GroupID string         `json:"groupId"`
	Kind    contracts.Kind `json:"kind"`
	Total   *int64         `json:"total,omitempty"`
}

// Failure is one failed job of a group.
type Failure struct {
	JobID      string          `json:"jobId"`
	Type       string          `json:"type,omitempty"`
	Attempts   int             `json:"attempts"`
	Error      string          `json:"error"`
	FinishedAt time.Time       `json:"finishedAt"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// FailureList is a page of a group's failed jobs, newest first.
type FailureList struct {
	Failures []Failure `json:"failures"`
	Next     *string   `json:"next"`
	// Kept is how many failures the group keeps.
	Kept int64 `json:"kept"`
}

// RetryResult is the answer to retry-failed (202).
type RetryResult struct {
	Tenant  string `json:"tenant"`
	GroupID string `json:"groupId"`
	RetryOf string `json:"retryOf"`
	// Jobs counts the failed jobs resubmitted; the new group is sealed at it.
	Jobs int64 `json:"jobs"`
	// Skipped counts failed jobs whose type and payload had expired.
	Skipped int64 `json:"skipped"`
}

// Job is one job of a submission.
type Job struct {
	// ID is the job's id, unique in its group.
	ID string `json:"jobId"`
	// Type is the job type.
	Type string `json:"type"`
	// Payload is the job's JSON payload; nil for none.
	Payload json.RawMessage `json:"payload,omitempty"`
}
