package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The dashboard's one reading of its figures (docs/ARCHITECTURE.md §10):
// Redis's through [redisq.Queue.ReadDashboard], READY's and the DLQ's from
// their streams, shared by every viewer and every scope for overviewFresh,
// and each scope's [Overview] derived from it.

const (
	// overviewFresh is how long a reading of the dashboard's figures is
	// reused: every viewer of every scope, and every handler of the
	// overview and the tenants, shares one reading at most this old.
	overviewFresh = 900 * time.Millisecond
	// snapshotTimeout bounds one reading, which every waiting viewer shares.
	snapshotTimeout = 10 * time.Second
)

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
// reading. A tenant sees its own figures only, of the worker types those
// of its own jobs (the types it submitted jobs of within
// BULKACTION_GROUP_TTL) and of the destinations those types and the
// explicit destinations its jobs named within it: never another tenant's
// name, types or figures.
func (u *uiAPI) overviewOf(s *snapshot, tenant string) *Overview {
	d := s.d
	ov := &Overview{Scope: "system", Tenant: tenant, At: s.at.UTC(), Workers: []WorkerTypeView{}}
	var types map[string]bool // nil: every type
	var dests map[string]bool // nil: every destination
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
		dests = make(map[string]bool, len(f.Types)+len(f.Destinations))
		for _, t := range f.Types {
			types[t], dests[t] = true, true // a job's destination is its type by default
		}
		for _, d := range f.Destinations {
			dests[d] = true
		}
	}
	nActive := int64(len(d.Active))
	if tenant != "" && !slices.Contains(d.Active, tenant) {
		nActive++ // an idle tenant that asks for capacity joins the active ones
	}
	ring := u.recentRing()
	ov.Rate = u.rateView(ring, tenant, nActive, redisq.ParseTenantWeight(d.Weights[tenant]))
	ov.Destinations = u.destinationsView(ring, dests)
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
