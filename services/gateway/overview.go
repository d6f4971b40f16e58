package gateway

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The dashboard's API (docs/ARCHITECTURE.md §10): GET /v1/overview and its
// SSE stream, GET /v1/tenants (tenants.go) and
// GET /v1/groups/{groupId}/progress. The handlers are here; the bodies are
// in overview_views.go, the shared reading of the figures in
// overview_reading.go, the admitted-rate sampler in overview_sampler.go and
// the destinations' learned rates in overview_destinations.go.

// OverviewEvery is the period of GET /v1/overview/events.
const OverviewEvery = time.Second

// uiAPI holds the dashboard API's state: the admitted-rate ring and the
// shared reading of the figures. table() makes one per call; only the one
// behind the mux's handlers is ever used, and it starts nothing until a
// request.
type uiAPI struct {
	g *Gateway

	sampleMu sync.Mutex // one sample at a time: a second caller finds it taken
	ringMu   sync.Mutex
	ring     []rateSample // oldest first, consecutive or not
	sampling bool

	destMu   sync.Mutex
	destPrev map[string]destCount // each destination's counts at the last reading
	destNow  *redisq.DestRates    // the last reading

	snapMu  sync.Mutex
	snap    *snapshot     // the latest reading
	reading *snapshotCall // the reading under way, which callers wait for
}

func newUIAPI(g *Gateway) *uiAPI { return &uiAPI{g: g} }

// scope returns the tenant a dashboard request reads ("" = every tenant,
// admin only); ok is false when the key does not reach the tenant named.
func scope(r *http.Request) (tenant string, ok bool) {
	p := principal(r)
	t, ok := p.tenantFor(r)
	if p.Admin {
		return t, true
	}
	return t, ok
}

// scopeOf is [scope] for a handler: it answers 404 for a tenant the key
// does not reach and 400 for a malformed one, and then ok is false.
func scopeOf(w http.ResponseWriter, r *http.Request) (tenant string, ok bool) {
	tenant, ok = scope(r)
	if !ok {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such tenant")
		return "", false
	}
	if tenant != "" {
		if err := contracts.ValidateTenant(tenant); err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad tenant", fieldError(err))
			return "", false
		}
	}
	return tenant, true
}

// overview: GET /v1/overview[?tenant=].
func (u *uiAPI) overview(w http.ResponseWriter, r *http.Request) {
	tenant, ok := scopeOf(w, r)
	if !ok {
		return
	}
	ov, err := u.read(r.Context(), tenant)
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

// overviewEvents: GET /v1/overview/events[?tenant=], Server-Sent Events:
// an "overview" event with an [Overview] every OverviewEvery, until the
// client leaves or the gateway stops.
func (u *uiAPI) overviewEvents(w http.ResponseWriter, r *http.Request) {
	tenant, ok := scopeOf(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	ov, err := u.read(ctx, tenant)
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	// The subscription ends the stream when the gateway shuts down; no
	// group event names its group.
	sub, err := u.g.hub.subscribe(contracts.GroupRef{ID: "dashboard-overview"})
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	defer u.g.hub.unsubscribe(sub)
	u.g.deps.Metrics.GatewaySSE.Inc()
	defer u.g.deps.Metrics.GatewaySSE.Dec()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(ov *Overview) error {
		b, err := json.Marshal(ov)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(append([]byte("event: overview\ndata: "), b...), "\n\n"...)); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send(ov) != nil {
		return
	}
	t := time.NewTicker(OverviewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.dropped:
			return
		case <-t.C:
		}
		ov, err := u.read(ctx, tenant)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			u.g.log.Warn("dashboard: overview not read", "err", err)
			if _, err := w.Write([]byte(": overview unavailable\n\n")); err != nil || rc.Flush() != nil {
				return
			}
			continue
		}
		if send(ov) != nil {
			return
		}
	}
}

// groupProgress: GET /v1/groups/{groupId}/progress.
func (u *uiAPI) groupProgress(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	info, found, err := u.g.q.Group(r.Context(), ref)
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	if !found {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		return
	}
	samples, err := u.g.q.Progress(r.Context(), ref)
	if err != nil {
		u.g.unavailable(w, r, err)
		return
	}
	v := ProgressView{Tenant: ref.Tenant, GroupID: ref.ID, Samples: make([]ProgressPoint, 0, len(samples)), State: info.State,
		Jobs: info.Jobs, Done: info.Done, Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled,
		At: time.Now().UTC()}
	if info.Declared >= 0 {
		t := info.Declared
		v.Total = &t
	}
	for i := len(samples) - 1; i >= 0; i-- {
		v.Samples = append(v.Samples, ProgressPoint{At: time.UnixMilli(samples[i].AtMs).UTC(), Count: samples[i].Count})
	}
	writeJSON(w, http.StatusOK, v)
}
