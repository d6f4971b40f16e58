package demo

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// Scales of the demo workload.
const (
	// ScaleFull is a minute of work or more: 23,100 jobs at 400 jobs/s.
	ScaleFull = "full"
	// ScaleSmall has the same shape with a tenth of the jobs, a shorter
	// head start for the urgent group, and a partner API of lower
	// capacity whose phases are a quarter as long.
	ScaleSmall = "small"
)

// How long a demo run takes from start to summary, as measured with
// redis-server on a 2-core machine (`dev --help` and the README say it).
const (
	FullDuration  = "60 to 90 seconds"
	SmallDuration = "10 to 20 seconds"
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
	// Payload is the payload of every job of the group; Run sets it for a
	// Partner group.
	Payload json.RawMessage
	// Partner makes the group's jobs call the demo's partner API
	// (Workload.Partner, Options.Partner): "http" jobs whose payload Run
	// fills in with the partner's URL.
	Partner bool
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
	// Partner is the capacity of the partner API the Partner groups call
	// (StartPartner): it changes during the run, and the adaptive rate
	// learns it.
	Partner Capacity
}

// Processors are the demo's processors: the built-in ones with bo, and
// SMSType run like "sleep". The "http" processor may also call the partner
// API p (nil = none), at its address alone: 127.0.0.1:<its port> joins
// bo.AllowedHosts, not the rest of the loopback addresses, unless
// bo.AllowAnyHost already allows every host.
func (w Workload) Processors(bo builtin.Options, p *Partner) *processor.Mux {
	if p != nil && !bo.AllowAnyHost {
		bo.AllowedHosts = append(slices.Clone(bo.AllowedHosts), p.Addr())
	}
	mux := processor.NewMux()
	builtin.Register(mux, bo)
	if w.SMSType != "" {
		mux.Handle(w.SMSType, builtin.Sleep(bo))
	}
	return mux
}

// partnerPayload is the payload of a job that calls the partner API at
// url: a contact to update.
func partnerPayload(url string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"url": url, "method": "POST", "body": map[string]any{"contact": "crm", "fields": []string{"email", "phone"}}})
	return b
}

// TotalJobs is the number of jobs of every group.
func (w Workload) TotalJobs() int {
	n := 0
	for _, g := range w.Groups {
		n += g.Jobs
	}
	return n
}

// sleepPayload is a "sleep" job's payload: 5-20 ms of work, a share
// failRate of retryable failures and rare permanent failures. It injects
// no rate limit (429): the adaptive rate, on in the demo, learns per job
// type, and would take random 429s of "sleep" jobs for a capacity of
// every "sleep" group; the demo's one rate-limited downstream is the
// partner API.
func sleepPayload(failRate float64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"ms": 5, "jitterMs": 15, "failRate": failRate, "permanentFailRate": 0.002})
	return b
}

// partnerBurst is how much of its rate the partner API's bucket holds.
const partnerBurst = 200 * time.Millisecond

// ForScale returns the workload of a scale: one tenant's big newsletter of
// 20,000 jobs, another's CRM sync of 1,500 against a partner API whose
// capacity changes during the run, a tenant that splits 800 jobs into four
// bulk actions (it still gets one tenant's share), two tenants of a few
// hundred, and an urgent high-priority recall of 150 jobs submitted a few
// seconds in (a tenth of each at ScaleSmall). The partner API accepts
// 60 calls/s, 20/s from 12 s, 100/s from 24 s (20/s, 8/s from 3 s and 40/s
// from 6 s at ScaleSmall). initech's billing runs at most 3 jobs at once
// (maxInFlight), and umbrella's survey is an "sms" job type limited to 20
// jobs/s (5/s at ScaleSmall).
func ForScale(scale string) (Workload, error) {
	div, vipAfter, rps, sms := 1, 5*time.Second, 400, 20
	partner := []Phase{{From: 0, Rps: 60}, {From: 12 * time.Second, Rps: 20}, {From: 24 * time.Second, Rps: 100}}
	switch scale {
	case ScaleFull, "":
		scale = ScaleFull
	case ScaleSmall:
		div, vipAfter, rps, sms = 10, 2*time.Second, 300, 5
		partner = []Phase{{From: 0, Rps: 20}, {From: 3 * time.Second, Rps: 12}, {From: 6 * time.Second, Rps: 40}}
	default:
		return Workload{}, fmt.Errorf("demo: scale %q: must be %s or %s", scale, ScaleFull, ScaleSmall)
	}
	return Workload{
		Scale: scale, GlobalRps: rps, WorkerCount: 16, JobType: builtin.TypeSleep,
		SMSType: "sms", TypeRateLimits: fmt.Sprintf("sms=%d/s", sms),
		Partner: Capacity{Name: "hooli's partner API", Phases: partner, Burst: partnerBurst},
		Groups: []Group{
			{Tenant: "acme", ID: "newsletter", Jobs: 20000 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.09)},
			// Its jobs call the partner API ("http" jobs), which answers 429
			// with "Retry-After: 1" past its capacity: the adaptive rate
			// learns that capacity as it changes, and admits hooli's jobs no
			// faster.
			{Tenant: "hooli", ID: "crm-sync", Jobs: 1500 / div, Priority: contracts.PriorityNormal, Type: builtin.TypeHTTP, Partner: true},
			{Tenant: "globex", ID: "sync-eu", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.05)},
			{Tenant: "globex", ID: "sync-us", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.05)},
			{Tenant: "globex", ID: "sync-apac", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.05)},
			{Tenant: "globex", ID: "sync-latam", Jobs: 200 / div, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.05)},
			{Tenant: "initech", ID: "billing", Jobs: 400 / div, MaxInFlight: 3, Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03)},
			{Tenant: "umbrella", ID: "survey", Jobs: 250 / div, Type: "sms", Priority: contracts.PriorityNormal, Payload: sleepPayload(0.03)},
			{Tenant: "umbrella", ID: "vip-recall", Jobs: 150 / div, Priority: contracts.PriorityHigh, After: vipAfter, Payload: sleepPayload(0.03)},
		},
	}, nil
}
