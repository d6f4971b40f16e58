package demo

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// Scales of the demo workload.
const (
	// ScaleFull is a minute of work or more: 23,100 jobs at 400 jobs/s.
	ScaleFull = "full"
	// ScaleSmall has the same shape with a tenth of the jobs and a shorter
	// head start for the urgent group. It lasts as long as hooli's
	// unluckiest job, answered 429 (Retry-After 4 s) several times in a row.
	ScaleSmall = "small"
)

// How long a demo run takes from start to summary, as measured with
// redis-server on a 2-core machine (`dev --help` and the README say it).
const (
	FullDuration  = "60 to 90 seconds"
	SmallDuration = "30 to 40 seconds"
)

// Group is one tenant's bulk action in the workload. The zero value is not
// usable: Tenant, ID and Jobs are required.
type Group struct {
	// Tenant is the tenant the group belongs to.
	Tenant string
	// ID is the group id.
	ID string
	// Jobs is the number of jobs.
	Jobs int
	// Priority is the group's level; "" means normal.
	Priority contracts.Priority
	// MaxInFlight bounds the group's admitted, unfinished jobs; 0 = none.
	MaxInFlight int64
	// Type is the job type of the group's jobs; "" means the workload's
	// JobType.
	Type string
	// After is how long after the start the group is submitted; 0 = at once.
	After time.Duration
	// Payload is the "sleep" payload of every job of the group.
	Payload json.RawMessage
}

// Workload is the demo's groups and the settings under which they run.
// The zero value has no groups; build one with ForScale.
type Workload struct {
	// Scale is ScaleFull or ScaleSmall.
	Scale string
	// Groups are the tenants' bulk actions, the biggest first.
	Groups []Group
	// GlobalRps is the global admission limit per second the demo runs
	// with unless BULKACTION_GLOBAL_RPS is set.
	GlobalRps int
	// WorkerCount is the worker concurrency the demo runs with unless
	// BULKACTION_WORKER_COUNT is set.
	WorkerCount int
	// JobType is the type of the jobs of groups that name none ("sleep").
	JobType string
	// SMSType is a second job type, run like JobType but behind the
	// per-type rate limit TypeRateLimits sets.
	SMSType string
	// TypeRateLimits is the per-type rate limit the demo runs with unless
	// BULKACTION_TYPE_RATE_LIMITS is set.
	TypeRateLimits string
}

// TotalJobs is the number of jobs of every group.
func (w Workload) TotalJobs() int {
	n := 0
	for _, g := range w.Groups {
		n += g.Jobs
	}
	return n
}

// sleepPayload is a "sleep" job's payload: 5-20 ms of work, a few
// retryable failures and rate-limit answers with a Retry-After, and rare
// permanent failures.
func sleepPayload(failRate, rateLimitRate float64, retryAfterMs int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"ms": 5, "jitterMs": 15, "failRate": failRate, "rateLimitRate": rateLimitRate,
		"retryAfterMs": retryAfterMs, "permanentFailRate": 0.002,
	})
	return b
}

// ForScale returns the workload of a scale: one tenant's big newsletter of
// 20,000 jobs, another's CRM sync of 1,500 against a partner API that
// rate-limits hard, a tenant that splits 800 jobs into four bulk actions
// (it still gets one tenant's share), two tenants of a few hundred, and an
// urgent high-priority recall of 150 jobs submitted a few seconds in (a
// tenth of each at ScaleSmall). initech's billing runs at most 3 jobs at
// once (maxInFlight), and umbrella's survey is an "sms" job type limited
// to 20 jobs/s (5/s at ScaleSmall).
func ForScale(scale string) (Workload, error) {
	div, vipAfter, rps, sms := 1, 5*time.Second, 400, 20
	switch scale {
	case ScaleFull, "":
		scale = ScaleFull
	case ScaleSmall:
		div, vipAfter, rps, sms = 10, 2*time.Second, 300, 5
	default:
		return Workload{}, fmt.Errorf("demo: scale %q: must be %s or %s", scale, ScaleFull, ScaleSmall)
	}
	return Workload{
		Scale: scale, GlobalRps: rps, WorkerCount: 16, JobType: builtin.TypeSleep,
		SMSType: "sms", TypeRateLimits: fmt.Sprintf("sms=%d/s", sms),
		Groups: []Group{
			{Tenant: "acme", ID: "newsletter", Jobs: 20000 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.01, 0.08, 2000)},
			// Its partner API answers 429 with "Retry-After: 4" to half the
			// calls: its jobs pile up in the backoff queue and its congestion
			// level rises, then falls as they drain.
			{Tenant: "hooli", ID: "crm-sync", Jobs: 1500 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.01, 0.5, 4000)},
			{Tenant: "globex", ID: "sync-eu", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03, 0.02, 500)},
			{Tenant: "globex", ID: "sync-us", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03, 0.02, 500)},
			{Tenant: "globex", ID: "sync-apac", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03, 0.02, 500)},
			{Tenant: "globex", ID: "sync-latam", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03, 0.02, 500)},
			{Tenant: "initech", ID: "billing", Jobs: 400 / div, MaxInFlight: 3, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.01, 0.02, 500)},
			{Tenant: "umbrella", ID: "survey", Jobs: 250 / div, Type: "sms", Priority: contracts.PriorityNormal, Payload: sleepPayload(0.01, 0.02, 500)},
			{Tenant: "umbrella", ID: "vip-recall", Jobs: 150 / div, Priority: contracts.PriorityHigh, After: vipAfter, Payload: sleepPayload(0.01, 0.02, 500)},
		},
	}, nil
}
