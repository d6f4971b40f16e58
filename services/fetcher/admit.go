package fetcher

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// next says how the admit loop waits after a round.
type next struct {
	wait time.Duration // sleep this long from since (0 = go on at once)
	// since is when the wait starts: when the admission call returned.
	// The rate gate's wake-up time is a time on its clock, so the rest of
	// the round (publishing to READY and waiting for the acknowledgements,
	// the group events) is part of the wait, not added to it: otherwise
	// every round would hand on its share of the window late by that long,
	// and a round slower than half the pacer's burst tolerance would leave
	// part of the window unused. Zero: the wait starts when the round ends.
	since time.Time
	full  bool // READY was full: back off, growing
	idle  bool // nothing queued: wait for a notification or MaxIdle
	// notify: a notification (new work) ends the wait early. Set when jobs
	// wait for their types' rate limits: work of other types arriving
	// meanwhile need not wait for them.
	notify bool
	// sched: with idle, a group passed by for its schedule is due then
	// (0 = none): the wait ends by then
	sched time.Duration
}

// left is how much of the wait is left at now.
func (n next) left(now time.Time) time.Duration {
	if n.since.IsZero() {
		return n.wait
	}
	return n.wait - now.Sub(n.since)
}

// notCurrentWait is how long admission waits, after a round that found
// SUBMIT's position not current, before it looks again.
const notCurrentWait = 50 * time.Millisecond

// admitLoop runs admission rounds until ctx is cancelled. wake receives a
// value when another fetcher (or this one) enqueued jobs.
func (f *Fetcher) admitLoop(ctx context.Context, wake <-chan struct{}) {
	bp := minBackpressureWait
	idle := time.NewTimer(f.cfg.MaxIdle)
	defer idle.Stop()
	for ctx.Err() == nil {
		n := f.admit(ctx)
		switch {
		case n.full:
			if !loop.Sleep(ctx, bp) {
				return
			}
			bp = min(2*bp, maxBackpressureWait)
			continue
		case n.idle:
			d := f.cfg.MaxIdle
			if n.sched > 0 {
				d = min(d, n.sched)
			}
			idle.Reset(d)
			select {
			case <-wake:
			case <-idle.C:
			case <-ctx.Done():
				return
			}
		case n.notify:
			idle.Reset(max(n.left(time.Now()), 0))
			select {
			case <-wake:
			case <-idle.C:
			case <-ctx.Done():
				return
			}
		default:
			if !loop.Sleep(ctx, n.left(time.Now())) {
				return
			}
		}
		bp = minBackpressureWait
	}
}

// windowsInterval is how often a fetcher computes again the open
// intervals of the sending windows that are due (redisq
// Queue.RefreshWindows): a group created with its tenant's default windows
// is held until then.
const windowsInterval = 500 * time.Millisecond

// windowsLoop keeps the groups' sending windows computed ahead
// (docs/ARCHITECTURE.md §5, Schedules), and wakes admission when it
// computed some.
func (f *Fetcher) windowsLoop(ctx context.Context) {
	loop.Every(ctx, windowsInterval, func(ctx context.Context) {
		for ctx.Err() == nil {
			n, err := f.d.Queue.RefreshWindows(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("sending windows", "err", err)
				}
				return
			}
			if n > 0 {
				f.wakeAdmission()
			}
			if n < redisq.RefreshWindowsBatch {
				return
			}
		}
	})
}

// roomReuseFor is how long after a round that found nothing more to admit
// the next round may admit against that round's measurement of READY
// instead of measuring again (handoff.Room.Recent): new work after a quiet
// spell is handed on one request sooner.
const roomReuseFor = 100 * time.Millisecond

// admit runs one round: measure READY's free room, admit up to that many
// jobs, publish and confirm them, and publish the group transitions seen.
// A round that has started is finished even if ctx is cancelled meanwhile.
func (f *Fetcher) admit(parent context.Context) next {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	var turns []redisq.ShardTurn
	share := 1.0
	unlock := func() {}
	if f.shards != nil {
		// with shards, from the shards this fetcher holds, each with what
		// is due of its grant (docs/ARCHITECTURE.md §11.1), found before
		// READY is measured, so a round with nothing due costs no request;
		// until admitted has counted the round's jobs, no report reads what
		// the shards admitted
		f.shards.round.Lock()
		unlock = sync.OnceFunc(f.shards.round.Unlock)
		defer unlock()
		var wait time.Duration
		if turns, wait, share = f.shards.turns(); len(turns) == 0 {
			if wait == 0 {
				return next{idle: true}
			}
			return next{wait: wait, notify: true}
		}
	}
	// After a round that left nothing waiting, the next round may reuse
	// its measurement: an older measurement only understates the room.
	// Should the reused rooms hold any job, the round after measures again
	// at once.
	var rooms handoff.Rooms
	reused := false
	if f.roomQuiet {
		rooms, reused = f.room.Recent(roomReuseFor)
	}
	f.roomQuiet = false
	if !reused {
		var err error
		if rooms, err = f.room.Measure(ctx); err != nil {
			f.log.Warn("READY size", "err", err)
			return next{wait: errorWait}
		}
	}
	if share > 0 && share < 1 {
		// READY's rooms are measured whole by every fetcher, and each
		// shard reserves what it hands on in keys of its own: a fetcher
		// takes its shards' part of the demand (docs/ARCHITECTURE.md §11.1)
		rooms = rooms.Part(share)
	}
	// Each job type gets its own room; with UnservedTypes "hold" only the
	// types a live worker serves get any.
	free, opt := f.cfg.AdmitBatchSize, redisq.WithTypeRooms(rooms.ByType, rooms.Capacity)
	if f.cfg.UnservedTypes == UnservedHold {
		live := rooms.LiveOnly()
		free, opt = handoff.Sum(live), redisq.WithTypeRooms(live, 0)
	}
	if free == 0 {
		if reused {
			return next{} // measure again
		}
		f.d.Metrics.BackpressureRejected.Inc()
		return next{full: true}
	}
	// The rooms were measured at READY's sequence rooms.Seq: the admission
	// takes from them what other fetchers and dispatchers handed on since,
	// in the same script, so together they never overfill a type's room.
	// With the adaptive rate on, the learned rates of destinations are
	// per-type limits of this call (capped by the static ones).
	learned, lerr := f.d.Queue.LearnedRates(ctx)
	if lerr != nil {
		f.log.Warn("reading the learned destination rates: using the last ones", "err", lerr)
	}
	// Only while SUBMIT's position is current: a Redis that came back older
	// admits nothing until the replay has applied again what it lost (a
	// later notBefore, a pause, a cancel: docs/ARCHITECTURE.md §6.7).
	opts := []redisq.AdmitOption{opt, redisq.WithReadySeq(rooms.Seq), redisq.WithLearnedRates(learned), redisq.IfCurrent(submitLog)}
	if f.shards != nil {
		opts = append(opts, redisq.WithShardTurns(turns...))
	}
	asked := min(free, f.cfg.AdmitBatchSize)
	res, err := f.d.Queue.Admit(ctx, asked, opts...)
	admitted := time.Now()
	if f.shards != nil {
		if res != nil {
			f.shards.admitted(res, asked)
		}
		unlock()
	}
	if errors.Is(err, redisq.ErrNotCurrent) {
		if res != nil && len(res.Jobs) > 0 {
			// the shards found current admitted these (sharded Admit)
			f.publish(ctx, res.Jobs)
		}
		f.startReplay()
		return next{wait: notCurrentWait}
	}
	if err != nil {
		f.log.Warn("admission failed", "err", err)
		return next{wait: errorWait}
	}
	if !reused {
		// (a reused measurement may hold jobs a fresh one would not: the
		// next round measures and reports)
		f.reportHeld(res.Held, rooms.Live)
	}
	for _, n := range res.RateHeld {
		f.d.Metrics.AdmissionHeld.WithLabelValues(telemetry.HeldTypeRate).Add(float64(n))
	}
	m := f.d.Metrics
	m.DequeueTotal.Add(float64(len(res.Jobs) + res.Parked))
	m.RateLimitAllowed.Add(float64(len(res.Jobs)))
	m.RateLimitDenied.WithLabelValues(telemetry.DenyReasonGlobal).Add(float64(res.DeniedGlobal))
	groupReason := telemetry.DenyReasonGroup
	if f.d.Queue.Config().Mode == redisq.ModePaced {
		groupReason = telemetry.DenyReasonPacing
	}
	m.RateLimitDenied.WithLabelValues(groupReason).Add(float64(res.DeniedGroup))
	m.BackpressureAdmitted.WithLabelValues(telemetry.DestinationReady).Add(float64(len(res.Jobs)))
	m.BackpressureAdmitted.WithLabelValues(telemetry.DestinationNonReady).Add(float64(res.Parked))

	if len(res.Jobs) > 0 {
		f.publish(ctx, res.Jobs)
	}
	f.transitions(ctx, res.Started, contracts.StateRunning)
	f.transitions(ctx, res.Drained, contracts.StateAggregating)

	switch {
	case res.WakeMs == redisq.WakeHeld && reused:
		return next{} // measure again
	case res.WakeMs == redisq.WakeHeld:
		// cut short: READY is full for the types of the jobs still waiting
		f.d.Metrics.BackpressureRejected.Inc()
		return next{full: true}
	case res.WakeMs == 0:
		return next{}
	case res.WakeMs > 0:
		// the rate gate's wake-up time: the global one's, or, when only
		// jobs of rate-limited types wait, the first of those types'; a
		// destination a Retry-After stops has no rate until the window's
		// end, but may go on when the stop ends
		wake := res.WakeMs
		if ms, ok := learned.StopEnd(res.RateHeld, res.NowMs); ok && ms < wake {
			wake = max(ms, 1)
		}
		d := time.Duration(wake) * time.Millisecond
		if f.shards != nil {
			// each shard's rate gate opens a few ms apart: one round for
			// several of them (their pacers' burst covers the gap)
			d = max(d, min(shardRoundGap, f.d.Queue.Config().Burst/2))
		}
		return next{wait: d, since: admitted, notify: len(res.RateHeld) > 0}
	}
	f.roomQuiet = true
	n := next{idle: true}
	if res.ScheduledMs > 0 {
		n.sched = time.Duration(res.ScheduledMs) * time.Millisecond
	}
	return n
}

// reportHeld counts the groups an admission round held for lack of READY
// room, and says which job types no live worker serves (at most one warning
// a minute per fetcher).
func (f *Fetcher) reportHeld(held map[string]int, live []string) {
	var unserved []string
	for t, n := range held {
		reason := telemetry.HeldReadyFull
		if f.cfg.UnservedTypes == UnservedHold && !slices.Contains(live, t) {
			reason = telemetry.HeldNoWorker
			unserved = append(unserved, t)
		}
		f.d.Metrics.AdmissionHeld.WithLabelValues(reason).Add(float64(n))
	}
	if len(unserved) > 0 {
		slices.Sort(unserved)
		f.heldLog.Warn(f.log, "jobs held: no live worker serves their type", "types", unserved)
	}
}

// publish hands admitted jobs to READY. Jobs that are not published stay
// leased until the dispatcher re-publishes them.
func (f *Fetcher) publish(ctx context.Context, jobs []redisq.LeasedJob) {
	ok, err := handoff.Publish(ctx, f.d, jobs, f.packing(), handoff.SpanAdmit, handoff.AttrDecision.String(handoff.DecisionReady))
	if err != nil {
		f.log.Warn("publish to READY failed; the rest is re-published when the leases expire",
			"jobs", len(jobs), "published", len(ok), "err", err)
	}
	f.log.Debug("admitted", "jobs", len(jobs), "published", len(ok))
}

// transitions publishes an event in state for each group, with the
// group's current counters.
func (f *Fetcher) transitions(ctx context.Context, groups []contracts.GroupRef, state contracts.GroupState) {
	for _, g := range groups {
		info, ok, err := f.d.Queue.Group(ctx, g)
		if err != nil {
			f.log.Warn("group event not published", "tenant", g.Tenant, "group", g.ID, "state", string(state), "err", err)
			continue
		}
		if !ok || info.State.Terminal() {
			// Ended since the admission call (a cancel): a late RUNNING or
			// AGGREGATING event would follow its final event.
			continue
		}
		c := info.GroupCounts
		c.State = state
		f.publishEvent(ctx, events.Change{Group: g, Counts: c})
	}
}

// packing is how admitted jobs are packed into READY messages.
func (f *Fetcher) packing() handoff.Packing {
	return f.cfg.Ready.Packing()
}
