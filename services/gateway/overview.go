package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The dashboard's API (docs/DESIGN §10): GET /v1/overview and its SSE
// stream, GET /v1/tenants and GET /v1/groups/{groupId}/progress.
//
// Admitted rate history: the rate limiter keeps one counter per window
// (redisq Keys.RateLimitGlobal and RateLimitTenant) that lives for two
// windows only, and nothing in Redis keeps the admitted rate over time. The
// gateway therefore samples the counters of the last complete window, once
// a window, into a ring of [OverviewHistory] windows held in its process:
// one GET of the global counter, the active tenants and the backoff queue's
// size, then one GET per active tenant, in two round trips. The sampling
// starts with the first dashboard request and goes on until the gateway
// stops; a replica's ring starts empty, and windows nobody sampled are null.

const (
	// OverviewHistory is how many rate-limit windows of admitted counts
	// the gateway keeps for the overview's chart (5 minutes of 1 s windows).
	OverviewHistory = 300
	// OverviewEvery is the period of GET /v1/overview/events.
	OverviewEvery = time.Second
	// overviewFresh is how long a reading of the dashboard's figures is
	// reused: every viewer of every scope, and every handler of the
	// overview and the tenants, shares one reading at most this old.
	overviewFresh = 900 * time.Millisecond
	// snapshotTimeout bounds one reading, which every waiting viewer shares.
	snapshotTimeout = 10 * time.Second
)

// uiAPI holds the dashboard API's state: the admitted-rate ring and the
// shared reading of the figures. table() makes one per call; only the one
// behind the mux's handlers is ever used, and it starts nothing until a
// request.
type uiAPI struct {
	g *Gateway

	ringMu   sync.Mutex
	ring     []rateSample // oldest first, consecutive or not
	sampling bool

	snapMu  sync.Mutex
	snap    *snapshot     // the latest reading
	reading *snapshotCall // the reading under way, which callers wait for
}

// snapshot is one reading of everything the overview and the tenants list
// show, for every tenant and the system: Redis's figures, READY's and the
// DLQ's counts and READY's consumers per type. Every scope is derived from
// it, so the cost of the dashboard does not grow with its viewers.
type snapshot struct {
	at        time.Time
	d         *redisq.Dashboard
	consumers map[string]*WorkerTypeView // READY's consumers per type
	ready     *ReadyView
	dlq       *DLQView
}

// snapshotCall is a reading under way.
type snapshotCall struct {
	done chan struct{}
	s    *snapshot
	err  error
}

// rateSample is one window's admitted counts.
type rateSample struct {
	window  int64
	global  int64
	active  int64
	backoff int64
	tenants map[string]int64
}

func newUIAPI(g *Gateway) *uiAPI { return &uiAPI{g: g} }

// nowMs is the time the rate limiter sees (Redis TIME, or the queue's
// clock when it has one).
func (u *uiAPI) nowMs(ctx context.Context) (int64, error) {
	t, err := u.g.q.Now(ctx)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
}

func (u *uiAPI) windowMs() int64 { return max(u.g.q.Config().Window.Milliseconds(), 1) }

// sample adds the last complete window to the ring unless it is there.
func (u *uiAPI) sample(ctx context.Context) error {
	now, err := u.nowMs(ctx)
	if err != nil {
		return err
	}
	w := now/u.windowMs() - 1
	u.ringMu.Lock()
	done := len(u.ring) > 0 && u.ring[len(u.ring)-1].window >= w
	u.ringMu.Unlock()
	if done {
		return nil
	}
	c, err := u.g.q.WindowCounts(ctx, w)
	if err != nil {
		return err
	}
	s := rateSample{window: w, active: c.Active, backoff: c.BackingOff, global: c.Global, tenants: c.Tenants}
	u.ringMu.Lock()
	defer u.ringMu.Unlock()
	if len(u.ring) > 0 && u.ring[len(u.ring)-1].window >= w {
		return nil
	}
	u.ring = append(u.ring, s)
	if len(u.ring) > OverviewHistory {
		u.ring = slices.Delete(u.ring, 0, len(u.ring)-OverviewHistory)
	}
	return nil
}

// startSampling starts the sampling loop once: it samples every window
// until the gateway shuts its streams (the hub's closeAll drops the
// loop's subscription to a group no event names).
func (u *uiAPI) startSampling() {
	u.ringMu.Lock()
	if u.sampling {
		u.ringMu.Unlock()
		return
	}
	u.sampling = true
	u.ringMu.Unlock()
	sub, err := u.g.hub.subscribe(contracts.GroupRef{ID: "dashboard-sampler"})
	if err != nil {
		return // shutting down
	}
	go func() {
		defer u.g.hub.unsubscribe(sub)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		every := time.Duration(u.windowMs()) * time.Millisecond
		t := time.NewTicker(min(every, time.Second))
		defer t.Stop()
		for {
			if err := u.sample(ctx); err != nil {
				u.g.log.Debug("dashboard: admitted rate not sampled", "err", err)
			}
			select {
			case <-sub.dropped:
				return
			case <-t.C:
			}
		}
	}()
}

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

// overview: GET /v1/overview[?tenant=].
func (u *uiAPI) overview(w http.ResponseWriter, r *http.Request) {
	tenant, ok := scope(r)
	if !ok {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such tenant")
		return
	}
	if tenant != "" {
		if err := contracts.ValidateTenant(tenant); err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad tenant", fieldError(err))
			return
		}
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
	tenant, ok := scope(r)
	if !ok {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such tenant")
		return
	}
	if tenant != "" {
		if err := contracts.ValidateTenant(tenant); err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad tenant", fieldError(err))
			return
		}
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

// read returns the overview of tenant ("" = the system), from a reading at
// most overviewFresh old.
func (u *uiAPI) read(ctx context.Context, tenant string) (*Overview, error) {
	sn, err := u.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return u.overviewOf(sn, tenant), nil
}

// snapshot returns the latest reading when it is at most overviewFresh old,
// else makes one: concurrent callers wait for the one reading under way
// rather than start their own (whoever leaves does not cancel it for the
// others).
func (u *uiAPI) snapshot(ctx context.Context) (*snapshot, error) {
	u.startSampling()
	u.snapMu.Lock()
	if s := u.snap; s != nil && time.Since(s.at) < overviewFresh {
		u.snapMu.Unlock()
		return s, nil
	}
	call := u.reading
	if call == nil {
		call = &snapshotCall{done: make(chan struct{})}
		u.reading = call
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
			defer cancel()
			s, err := u.readSnapshot(rctx)
			u.snapMu.Lock()
			call.s, call.err = s, err
			if err == nil {
				u.snap = s
			}
			u.reading = nil
			u.snapMu.Unlock()
			close(call.done)
		}()
	}
	u.snapMu.Unlock()
	select {
	case <-call.done:
		return call.s, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readSnapshot reads every figure once: the rate sample, Redis's figures of
// every tenant (redisq ReadDashboard), READY's consumers, READY's depth and
// the dead letters.
func (u *uiAPI) readSnapshot(ctx context.Context) (*snapshot, error) {
	if err := u.sample(ctx); err != nil {
		return nil, err
	}
	d, err := u.g.q.ReadDashboard(ctx, u.g.q.Config().GroupTTL.Milliseconds())
	if err != nil {
		return nil, err
	}
	s := &snapshot{at: time.Now(), d: d, consumers: map[string]*WorkerTypeView{}}
	if err := u.consumers(ctx, s.consumers); err != nil {
		u.g.log.Debug("dashboard: READY consumers not read", "err", err)
	}
	s.ready = u.ready(ctx)
	s.dlq = u.dlq(ctx)
	return s, nil
}

// overviewOf derives the overview of tenant ("" = the system) from a
// reading. A tenant sees its own figures only, and of the worker types
// those of its own jobs (the types it submitted jobs of within
// BULKACTION_GROUP_TTL): never another tenant's name, types or figures.
func (u *uiAPI) overviewOf(s *snapshot, tenant string) *Overview {
	d := s.d
	ov := &Overview{Scope: "system", Tenant: tenant, At: s.at.UTC(), Workers: []WorkerTypeView{}}
	var types map[string]bool // nil: every type
	if tenant == "" {
		ov.BackoffJobs = d.NonReady
		ov.ActiveTenants = int64(len(d.Active))
		for _, f := range d.Tenants {
			ov.ActiveGroups += f.ActiveGroups
			ov.QueuedJobs += f.QueuedJobs
			ov.InFlightJobs += f.InFlightJobs
		}
		ov.Ready, ov.DLQ = s.ready, s.dlq
	} else {
		ov.Scope = "tenant"
		f := d.Tenant(tenant)
		ov.BackoffJobs, ov.ActiveGroups, ov.QueuedJobs, ov.InFlightJobs = f.BackingOffJobs, f.ActiveGroups, f.QueuedJobs, f.InFlightJobs
		if slices.Contains(d.Active, tenant) {
			ov.ActiveTenants = 1
		}
		types = make(map[string]bool, len(f.Types))
		for _, t := range f.Types {
			types[t] = true
		}
	}
	nActive := int64(len(d.Active))
	if tenant != "" && !slices.Contains(d.Active, tenant) {
		nActive++ // an idle tenant that asks for capacity joins the active ones
	}
	ov.Rate = u.rateView(tenant, nActive, redisq.ParseTenantWeight(d.Weights[tenant]))
	// workers: the announced types and READY's consumers
	nowMs := d.AtMs
	byType := map[string]*WorkerTypeView{}
	for _, wt := range d.WorkerTypes {
		until := time.UnixMilli(wt.UntilMs).UTC()
		byType[wt.Type] = &WorkerTypeView{Type: wt.Type, Live: wt.UntilMs > nowMs, AnnouncedUntil: &until}
	}
	for t, c := range s.consumers {
		v := byType[t]
		if v == nil {
			v = &WorkerTypeView{Type: t}
			byType[t] = v
		}
		v.Consumers, v.Running, v.WaitingPulls = c.Consumers, c.Running, c.WaitingPulls
	}
	for t, v := range byType {
		if types == nil || types[t] {
			ov.Workers = append(ov.Workers, *v)
		}
	}
	slices.SortFunc(ov.Workers, func(a, b WorkerTypeView) int { return strings.Compare(a.Type, b.Type) })
	return ov
}

// rateView builds the rate part from the ring.
func (u *uiAPI) rateView(tenant string, active, weight int64) RateView {
	wms := u.windowMs()
	global := int64(u.g.q.Config().GlobalLimit)
	limitAt := func(active int64) int64 {
		if tenant == "" {
			return global
		}
		return tenantLimit(global, active, weight)
	}
	v := RateView{WindowMs: wms, Limit: limitAt(active)}
	perSec := 1000 / float64(wms)
	v.LimitPerSecond = round2(float64(v.Limit) * perSec)
	u.ringMu.Lock()
	ring := slices.Clone(u.ring)
	u.ringMu.Unlock()
	h := RateHistory{WindowMs: wms, Admitted: []*int64{}, Limit: []*int64{}, Backoff: []*int64{}}
	if len(ring) > 0 {
		last := ring[len(ring)-1].window
		first := last - OverviewHistory + 1
		for len(ring) > 0 && ring[0].window < first {
			ring = ring[1:]
		}
		first = ring[0].window
		h.Start = time.UnixMilli(first * wms).UTC()
		n := int(last - first + 1)
		h.Admitted, h.Limit, h.Backoff = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		for _, s := range ring {
			i := s.window - first
			a, l, b := s.global, limitAt(s.active), s.backoff
			if tenant != "" {
				a = s.tenants[tenant]
			}
			h.Admitted[i], h.Limit[i] = &a, &l
			if tenant == "" {
				h.Backoff[i] = &b
			}
		}
		s := ring[len(ring)-1]
		a := s.global
		if tenant != "" {
			a = s.tenants[tenant]
		}
		v.Admitted = &a
		v.AdmittedPerSecond = round2(float64(a) * perSec)
	}
	v.History = h
	return v
}

// consumers adds READY's consumers to the worker types.
func (u *uiAPI) consumers(ctx context.Context, byType map[string]*WorkerTypeView) error {
	stream, err := u.g.deps.JS.Stream(ctx, u.g.deps.Names.StreamReady())
	if err != nil {
		return err
	}
	names := u.g.deps.Names
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		subjects := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			subjects = append(subjects, ci.Config.FilterSubject)
		}
		for _, s := range subjects {
			t, ok := names.TypeFromSubject(s)
			if !ok {
				continue
			}
			v := byType[t]
			if v == nil {
				v = &WorkerTypeView{Type: t}
				byType[t] = v
			}
			v.Consumers++
			v.Running += ci.NumAckPending
			v.WaitingPulls += ci.NumWaiting
		}
	}
	return lister.Err()
}

// ready reads READY's depth per type (one stream info request).
func (u *uiAPI) ready(ctx context.Context) *ReadyView {
	v := &ReadyView{Capacity: u.g.cfg.ReadyCapacity, Types: []ReadyDepth{}}
	counts, err := u.subjects(ctx, u.g.deps.Names.StreamReady(), u.g.deps.Names.ReadyAll())
	if err != nil {
		v.Error = "READY not read: " + err.Error()
		return v
	}
	depth := map[string]int64{} // jobs: a pack's subject names its job count
	for subj, n := range counts {
		if t, jobs, ok := u.g.deps.Names.ReadyFromSubject(subj); ok {
			depth[t] += int64(n) * int64(jobs)
		}
	}
	for t, n := range depth {
		v.Types = append(v.Types, ReadyDepth{Type: t, Depth: n})
		v.Total += n
	}
	slices.SortFunc(v.Types, func(a, b ReadyDepth) int { return strings.Compare(a.Type, b.Type) })
	return v
}

// dlq counts the dead letters per reason (one stream info request).
func (u *uiAPI) dlq(ctx context.Context) *DLQView {
	v := &DLQView{ByReason: []ReasonCount{}}
	all := u.g.deps.Names.DLQAll()
	counts, err := u.subjects(ctx, u.g.deps.Names.StreamDLQ(), all)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return v
	}
	if err != nil {
		v.Error = "DLQ not read: " + err.Error()
		return v
	}
	byReason := map[string]int64{} // a subject per tenant and reason
	for subj, n := range counts {
		_, reason, ok := u.g.deps.Names.DLQReason(subj)
		if !ok {
			continue
		}
		byReason[reason] += int64(n)
		v.Total += int64(n)
	}
	for reason, n := range byReason {
		v.ByReason = append(v.ByReason, ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(v.ByReason, func(a, b ReasonCount) int { return strings.Compare(a.Reason, b.Reason) })
	return v
}

// subjects returns the message count of each subject of a stream.
func (u *uiAPI) subjects(ctx context.Context, stream, filter string) (map[string]uint64, error) {
	st, err := u.g.deps.JS.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	return info.State.Subjects, nil
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

// tenantLimit is the most a tenant may be admitted in a window: its share,
// but never more than the global limit, which caps every tenant together
// (a weight above 1 can make the share alone larger).
func tenantLimit(limit, active, weight int64) int64 {
	return min(redisq.TenantShare(limit, active, weight), limit)
}

// ratio is a/b rounded to 4 digits, nil when b is 0.
func ratio(a, b int64) *float64 {
	if b <= 0 {
		return nil
	}
	f := math.Round(float64(a)/float64(b)*1e4) / 1e4
	return &f
}
