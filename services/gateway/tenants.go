package gateway

import (
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TenantList is the body of GET /v1/tenants.
type TenantList struct {
	// Tenants are sorted by name: every tenant with active groups, queued
	// jobs, a weight or a place among the tenants sharing the limit (an
	// admin key), or the key's own tenant.
	Tenants []TenantView `json:"tenants"`
	// WindowMs is the rate-limit window; GlobalLimit the jobs a window may
	// admit across every tenant.
	WindowMs    int64 `json:"windowMs"`
	GlobalLimit int64 `json:"globalLimit"`
	// Admitted is the jobs of every tenant admitted in the last complete
	// window (null before the first sample); an admin key only.
	Admitted *int64    `json:"admitted,omitempty"`
	At       time.Time `json:"at"`
}

// TenantView is one tenant's line of GET /v1/tenants.
type TenantView struct {
	Tenant string `json:"tenant"`
	// Weight is the tenant's weight (1 by default).
	Weight int64 `json:"weight"`
	// Active is true while the tenant shares the global limit (it asked
	// for capacity lately).
	Active bool `json:"active"`
	// RateLimit is the most the tenant may be admitted in a window: its
	// share max(1, floor(limit / active tenants)) * weight, at most the
	// global limit. An idle tenant is counted as one more active tenant
	// (what it gets when it asks for capacity).
	RateLimit int64 `json:"rateLimit"`
	// LimitShare is the tenant's part of the global limit when every
	// active tenant has work: its weight over the active tenants' weights
	// (its own added when it is idle), as the weighted fair queue divides
	// a saturated limit. The active tenants' shares add up to 1.
	LimitShare float64 `json:"limitShare"`
	// Admitted is the tenant's jobs admitted in the last complete window
	// (null before the first sample).
	Admitted *int64 `json:"admitted"`
	// RateShare is Admitted / every tenant's admitted jobs in that window:
	// the tenant's share of the rate now (null when nothing was admitted).
	RateShare *float64 `json:"rateShare"`
	// QueuedJobs counts its jobs accepted and not finished, in its groups
	// that have not ended; InFlightJobs those admitted and not finished;
	// BackingOffJobs those in the backoff queue.
	QueuedJobs     int64 `json:"queuedJobs"`
	InFlightJobs   int64 `json:"inFlightJobs"`
	BackingOffJobs int64 `json:"backingOffJobs"`
	// ActiveGroups counts its groups that exist and have not ended.
	ActiveGroups int64           `json:"activeGroups"`
	Quotas       TenantQuotaView `json:"quotas"`
}

// TenantQuotaView is a tenant's quotas in force (0 = unlimited; Own says
// the tenant has a limit of its own rather than the default) and their
// use (count / limit, null when unlimited).
type TenantQuotaView struct {
	MaxQueuedJobs   int64    `json:"maxQueuedJobs"`
	OwnQueuedJobs   bool     `json:"ownQueuedJobs"`
	QueuedJobsUse   *float64 `json:"queuedJobsUse"`
	MaxActiveGroups int64    `json:"maxActiveGroups"`
	OwnActiveGroups bool     `json:"ownActiveGroups"`
	ActiveGroupsUse *float64 `json:"activeGroupsUse"`
}

// listTenants: GET /v1/tenants. An admin key lists every tenant it can
// find; a tenant key gets its own tenant only. Both are derived from the
// dashboard's shared reading (uiAPI.snapshot), at most overviewFresh old.
func (u *uiAPI) listTenants(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	sn, err := u.snapshot(r.Context())
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	d := sn.d
	var tenants []string
	if p.Admin {
		for t := range d.Tenants {
			tenants = append(tenants, t)
		}
		slices.Sort(tenants)
	} else {
		tenants = []string{p.Tenant}
	}
	cfg := u.g.q.Config()
	out := TenantList{Tenants: make([]TenantView, 0, len(tenants)), WindowMs: u.windowMs(), GlobalLimit: int64(cfg.GlobalLimit),
		At: sn.at.UTC()}
	u.ringMu.Lock()
	var last *rateSample
	if n := len(u.ring); n > 0 {
		s := u.ring[n-1]
		last = &s
	}
	u.ringMu.Unlock()
	if last != nil && p.Admin {
		out.Admitted = &last.global
	}
	nActive := int64(len(d.Active))
	var activeWeights int64
	for _, t := range d.Active {
		activeWeights += redisq.ParseTenantWeight(d.Weights[t])
	}
	for _, t := range tenants {
		f := d.Tenant(t)
		v := TenantView{Tenant: t, Weight: redisq.ParseTenantWeight(d.Weights[t]), Active: slices.Contains(d.Active, t),
			QueuedJobs: f.QueuedJobs, ActiveGroups: f.ActiveGroups, InFlightJobs: f.InFlightJobs,
			BackingOffJobs: f.BackingOffJobs}
		n, sum := nActive, activeWeights
		if !v.Active {
			n, sum = n+1, sum+v.Weight
		}
		v.RateLimit = tenantLimit(int64(cfg.GlobalLimit), n, v.Weight)
		v.LimitShare = *ratio(v.Weight, sum)
		if last != nil {
			a := last.tenants[t]
			v.Admitted = &a
			v.RateShare = ratio(a, last.global)
		}
		v.Quotas = quotaView(&f.Quota)
		out.Tenants = append(out.Tenants, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func quotaView(tq *redisq.TenantQuota) TenantQuotaView {
	v := TenantQuotaView{MaxQueuedJobs: tq.MaxQueuedJobs, OwnQueuedJobs: tq.OwnQueuedJobs,
		MaxActiveGroups: tq.MaxActiveGroups, OwnActiveGroups: tq.OwnActiveGroups}
	v.QueuedJobsUse = ratio(tq.QueuedJobs, tq.MaxQueuedJobs)
	v.ActiveGroupsUse = ratio(tq.ActiveGroups, tq.MaxActiveGroups)
	return v
}

// ratio is a/b rounded to 4 digits, nil when b is 0.
func ratio(a, b int64) *float64 {
	if b <= 0 {
		return nil
	}
	f := math.Round(float64(a)/float64(b)*1e4) / 1e4
	return &f
}
