package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Span names.
const (
	// SpanProcess is the consumer span of one delivery of a READY message, a
	// child of the trace context the message carries. The result message
	// carries this span's context.
	SpanProcess = "bulkaction.process"
	// SpanBackoff is the span of sending a job back to the non-ready queue
	// after a retryable error or a rate limit; a child of [SpanProcess].
	SpanBackoff = "bulkaction.backoff"
)

// Span attribute keys. The job attributes use the same keys as the spans
// of the fetcher and the dispatcher.
const (
	// AttrTenant is the tenant of the job's group.
	AttrTenant = telemetry.AttrTenant
	// AttrGroupID is the job's group id.
	AttrGroupID = telemetry.AttrGroupID
	// AttrJobID is the job's id within its group.
	AttrJobID = telemetry.AttrJobID
	// AttrJobType is the job's type.
	AttrJobType = telemetry.AttrJobType
	// AttrAttempt is the attempt the READY message carries (1 first).
	AttrAttempt = telemetry.AttrAttempt
	// AttrDelivered is how often the READY message has been delivered.
	AttrDelivered = attribute.Key("bulkaction.delivered")
	// AttrOutcome is what the delivery came to: a result status (SUCCESS,
	// FAILED), RETRY, RATE_LIMITED, DROPPED (stale or cancelled) or
	// HANDED_BACK (negatively acknowledged for redelivery).
	AttrOutcome = attribute.Key("bulkaction.outcome")
	// AttrBackoffMs is the delay a backed-off job waits before its next
	// attempt, in milliseconds (on [SpanBackoff]).
	AttrBackoffMs = attribute.Key("bulkaction.backoff_ms")
)

// outcomeHandedBack is the [AttrOutcome] of a delivery negatively
// acknowledged for redelivery.
const outcomeHandedBack = "HANDED_BACK"

// claimed is one job of a delivery, being claimed or run. A READY message
// carries 1..N jobs; each becomes a claimed with a span of its own (the
// delivery's span for a message of one job), and the message is settled
// once all of its jobs are.
type claimed struct {
	msg       *message
	job       *contracts.ReadyJob
	Ctx       context.Context // carries Span
	Span      trace.Span
	delivered int  // JetStream's count of deliveries of the message
	claims    int  // claims of this attempt that reached Redis, this one included
	suspect   bool // its last holder stopped while it ran: it runs alone
	throttles int  // earlier attempts of the job that were rate limited
	extra     bool // not the message's first job: it takes a slot of its own
	ownSpan   bool // Span is the job's own, not the delivery's
	// stop is closed when the shutdown grace is over: a result waiting
	// for room on RESULT is given up then (handed back).
	stop <-chan struct{}
	// free gives back the job's slot, once (later calls do nothing): when
	// its processor has returned, so that the job's result, gathered for
	// a RESULT message, does not keep another job from running.
	free func()
	// runner counts the job among its group's jobs running here, which
	// a result batch of the group may wait for (results.begin).
	runner *runner
}

// message is a delivery and what its jobs came to.
type message struct {
	*consume.Delivery
	left atomic.Int32 // jobs not settled yet
	mu   sync.Mutex
	back *consume.Decision // the first hand-back among its jobs; nil = ack
	// held is the tracker that keeps the message in progress while any of
	// its jobs is claimed and not settled (running, waiting for a slot or
	// for the lane, or for its result's PubAck); nil before the claim.
	held *tracker
	// claimed are its jobs claimed to run, whose claims the worker renews
	// while the message is held (tracker.claims); set before the hold.
	claimed []redisq.Delivery
	// gone: the shutdown handed the message back while a job of it ran;
	// it is not settled again.
	gone atomic.Bool
}

// handle runs the deliveries of one pull (docs/ARCHITECTURE.md §6.3):
// invalid messages are dead-lettered, the jobs of the others are claimed in
// one Redis call, and each claimed job runs in its own goroutine. A message
// gives back the slot it was pulled with once its first job is settled;
// each further job of a message runs in a slot of its own, so no more jobs
// run at once than the worker has slots. ctx is Run's context; a delivery
// does not stop when it ends: every Redis or NATS call made for it has its
// own timeout (settleTimeout), and the processor runs under the tracker's
// job context.
func (w *Worker) handle(ctx context.Context, jobType string, msgs []jetstream.Msg, jobs *tracker) {
	base := context.WithoutCancel(ctx)
	cs := make([]claimed, 0, len(msgs))
	for _, msg := range msgs {
		if mc, ok := w.open(base, jobType, msg); ok {
			cs = append(cs, mc...)
		} else {
			w.slots.Release(1)
		}
	}
	if len(cs) == 0 {
		return
	}
	ds := make([]redisq.Delivery, len(cs))
	for i, c := range cs {
		ds[i] = redisq.Delivery{Group: c.job.Ref(), JobID: c.job.JobID, Attempt: c.job.Attempt}
	}
	cctx, cancel := context.WithTimeout(base, settleTimeout)
	outcomes, err := w.d.Queue.ClaimBatch(cctx, ds, redisq.ClaimHolder(w.holder))
	cancel()
	claimedAt := time.Now() // the claim saw every group as it was by now
	if err != nil {
		// The claim's answer is lost (a timeout, a dropped connection): its
		// script may have run, leaving the jobs RUNNING under this worker,
		// and their next delivery would be dropped as this worker's own
		// (claim.lua) until the repair took them back. Handing back what
		// this worker holds ends those claims, so the next delivery runs
		// them at once; when the claim did not run it changes nothing.
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(base), settleTimeout)
		if herr := w.d.Queue.HandBackHeld(hctx, w.holder, ds...); herr != nil {
			w.warn("claim answer lost and hand-back failed: the jobs, if claimed, run again once their claims expire", "err", herr)
		}
		hcancel()
	}
	if err == nil {
		// Every message with a job to run is kept in progress until all
		// its jobs are settled, those waiting for a slot included.
		for i, c := range cs {
			if outcomes[i].Outcome == redisq.ClaimRun {
				c.msg.claimed = append(c.msg.claimed, ds[i])
			}
		}
		for i, c := range cs {
			if outcomes[i].Outcome == redisq.ClaimRun {
				jobs.hold(c.msg)
			}
		}
	}
	var cancelled []contracts.GroupRef // groups whose jobs the claim counted as cancelled
	for i, c := range cs {
		switch {
		case err != nil:
			// Handed back above in Redis if it was claimed; the delivery
			// comes again.
			w.handBack(c, "claim", err)
		case outcomes[i].Outcome == redisq.ClaimRun:
			c.claims, c.throttles, c.suspect = outcomes[i].Claims, outcomes[i].Throttles, outcomes[i].Suspect
			c.stop = jobs.base.Done()
			c.runner = w.results.begin(c.job.Ref())
			jobs.add(1)
			go func() {
				defer jobs.done()
				defer w.results.leave(c.runner)
				// A further job of a message runs in a slot of its own; one
				// that had to wait for it startCheckAfter or longer checks
				// that its group was not cancelled meanwhile (cancel stops
				// what has not started).
				waited := c.extra && w.slots.TryAcquire(1) == 0
				if waited && !w.slots.Acquire(jobs.base) {
					w.settle(c, consume.Retry(0, nil)) // the shutdown grace is over
					return
				}
				var once sync.Once
				c.free = func() { once.Do(func() { w.slots.Release(1) }) }
				defer c.free()
				if waited && time.Since(claimedAt) >= startCheckAfter && w.cancelledBeforeStart(base, c) {
					return
				}
				w.run(c, jobs)
			}()
			continue
		case outcomes[i].Outcome == redisq.ClaimBusy:
			// A second delivery of a job another worker holds (it runs, or
			// its result is on the way): it comes back once that claim has
			// expired, or finds the job ended (docs/ARCHITECTURE.md §6.3).
			w.log.Debug("delivery of a job another worker holds handed back", "tenant", c.job.Tenant, "group", c.job.GroupID,
				"job", c.job.JobID, "attempt", c.job.Attempt, "in", outcomes[i].RetryIn)
			w.settle(c, consume.Retry(max(outcomes[i].RetryIn, nakDelay), nil))
		case outcomes[i].Outcome == redisq.ClaimStale, outcomes[i].Outcome == redisq.ClaimCancelled:
			w.log.Debug("delivery dropped", "tenant", c.job.Tenant, "group", c.job.GroupID, "job", c.job.JobID,
				"attempt", c.job.Attempt, "claim", string(outcomes[i].Outcome))
			if outcomes[i].Outcome == redisq.ClaimCancelled && !slices.Contains(cancelled, c.job.Ref()) {
				cancelled = append(cancelled, c.job.Ref())
			}
			w.count(c, telemetry.StatusDropped)
			w.settle(c, consume.Ack())
		default:
			w.handBack(c, "claim", fmt.Errorf("unexpected claim outcome %q", outcomes[i].Outcome))
		}
		if !c.extra {
			w.slots.Release(1)
		}
	}
	w.publishCounts(base, cancelled)
}

// cancelledBeforeStart reports whether c's group was cancelled after the
// claim, while c waited for a slot ([redisq.Queue.StartBatch], one call
// for the jobs starting at the same time: [starts]): the job was then
// counted as cancelled instead of run, its delivery is settled and its
// group's counts published. A job no longer RUNNING as its attempt is
// dropped the same way; if Redis cannot tell, the job runs.
func (w *Worker) cancelledBeforeStart(base context.Context, c claimed) bool {
	ctx, cancel := context.WithTimeout(base, settleTimeout)
	out, err := w.starts.start(ctx, redisq.Delivery{Group: c.job.Ref(), JobID: c.job.JobID, Attempt: c.job.Attempt})
	cancel()
	if err != nil || out == redisq.ClaimRun {
		return false
	}
	w.log.Debug("delivery dropped before its start", "tenant", c.job.Tenant, "group", c.job.GroupID, "job", c.job.JobID,
		"attempt", c.job.Attempt, "claim", string(out))
	w.count(c, telemetry.StatusDropped)
	w.settle(c, consume.Ack())
	if out == redisq.ClaimCancelled {
		w.publishCounts(base, []contracts.GroupRef{c.job.Ref()})
	}
	return true
}

// publishCounts publishes the current counts of groups whose counts the
// worker changed after they ended (jobs of a cancelled group counted as
// cancelled at claim), so that each group's last event adds up.
func (w *Worker) publishCounts(base context.Context, groups []contracts.GroupRef) {
	for _, g := range groups {
		ctx, cancel := context.WithTimeout(base, settleTimeout)
		info, ok, err := w.d.Queue.Group(ctx, g)
		if err == nil && ok {
			err = w.d.Events.Publish(ctx, events.Change{Group: g, Counts: info.GroupCounts})
		}
		cancel()
		if err != nil {
			w.warn("group event not published", "tenant", g.Tenant, "group", g.ID, "err", err)
		}
	}
}

// open decodes a delivery into its jobs and starts their spans; a message
// that is not a valid ready batch of jobType is dead-lettered and ok is
// false.
func (w *Worker) open(base context.Context, jobType string, msg jetstream.Msg) (cs []claimed, ok bool) {
	d := consume.Open(base, w.tracer, SpanProcess, msg)
	batch, err := contracts.DecodeReadyBatch(msg.Data(), w.d.Limits)
	if err == nil && batch.Jobs[0].Type != jobType {
		err = &contracts.ValidationError{Reason: contracts.ReasonSubjectMismatch, Field: "jobs[0].type",
			Problem: fmt.Sprintf("%q differs from subject token %q", batch.Jobs[0].Type, jobType),
			Limit:   "must equal the <type> token of the subject"}
	}
	if _, n, ok := w.d.Names.ReadyFromSubject(msg.Subject()); err == nil && ok && n != len(batch.Jobs) {
		// READY's room counts a message as the jobs its subject names
		err = &contracts.ValidationError{Reason: contracts.ReasonSubjectMismatch, Field: "jobs",
			Problem: fmt.Sprintf("%d jobs on a subject of %d", len(batch.Jobs), n),
			Limit:   "must be as many as the subject's job count (<type>.<n>; 1 without)"}
	}
	if err != nil {
		d.Decide(consume.DeadLetter(err))
		w.settleWithin(d)
		return nil, false
	}
	delivered := 1
	if md, err := msg.Metadata(); err == nil {
		delivered = int(md.NumDelivered)
	}
	m := &message{Delivery: d}
	m.left.Store(int32(len(batch.Jobs)))
	cs = make([]claimed, len(batch.Jobs))
	// A pack of jobs names each job's trace context (the handoff's job
	// traceparents): each job's span continues its own trace, linked to
	// the delivery's span; without them it is a child of the delivery's.
	var tps []string
	// What the delivery's context holds is looked up once, not per job: a
	// context.WithoutCancel allocates on each lookup.
	var dSpan trace.Span
	var dUntraced bool
	var dLink trace.Link
	if len(batch.Jobs) > 1 {
		if tps = msg.Headers().Values(handoff.HeaderJobTraceparent); len(tps) != len(batch.Jobs) {
			tps = nil
		} else {
			dLink = trace.LinkFromContext(d.Ctx)
		}
		dSpan, dUntraced = telemetry.Untraced(d.Ctx, w.tracer)
	}
	for i := range batch.Jobs {
		job := &batch.Jobs[i]
		c := claimed{msg: m, job: job, Ctx: d.Ctx, Span: d.Span, delivered: delivered, extra: i > 0}
		if len(batch.Jobs) > 1 {
			parent, sp, untraced := d.Ctx, dSpan, dUntraced
			var opts []trace.SpanStartOption
			if tps != nil {
				if sc := jobSpanContext(tps[i]); sc.IsValid() {
					parent = trace.ContextWithRemoteSpanContext(base, sc)
					opts = append(opts, trace.WithLinks(dLink), trace.WithSpanKind(trace.SpanKindConsumer))
					sp, untraced = telemetry.Untraced(parent, w.tracer)
				}
			}
			if untraced {
				c.Ctx, c.Span = parent, sp
			} else {
				c.Ctx, c.Span = w.tracer.Start(parent, SpanProcess, opts...)
			}
			c.ownSpan = true
		}
		if c.Span.IsRecording() {
			c.Span.SetAttributes(
				AttrTenant.String(job.Tenant), AttrGroupID.String(job.GroupID), AttrJobID.String(job.JobID),
				AttrJobType.String(job.Type), AttrAttempt.Int(job.Attempt), AttrDelivered.Int(delivered),
			)
		}
		cs[i] = c
	}
	return cs, true
}

// jobSpanContext is the span context of a job's W3C traceparent (invalid
// when it is none), as propagation.TraceContext extracts it; read from a
// context of its own, because looking it up in the delivery's (a
// context.WithoutCancel) allocates.
func jobSpanContext(traceparent string) trace.SpanContext {
	ctx := (propagation.TraceContext{}).Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// run runs a claimed job's processor and settles the delivery: result,
// back-off, or hand-back.
func (w *Worker) run(c claimed, jobs *tracker) {
	span, job := c.Span, c.job
	if c.suspect && w.exec == nil {
		// Its last holder stopped while it ran: it runs alone, so that if
		// this worker stops now, the job is the cause (a poison job), and
		// only such runs spend its budget (docs/ARCHITECTURE.md §6.3).
		release, ok := w.runAlone(jobs.base)
		if !ok { // the shutdown grace is over
			span.SetAttributes(AttrOutcome.String(outcomeHandedBack))
			w.settle(c, consume.Retry(0, nil))
			return
		}
		defer release()
		if w.refused(c, w.soloRun(c), "its worker stopped") {
			return
		}
	}

	d, ok := jobs.begin(c.msg)
	if !ok { // the shutdown grace is over
		span.SetAttributes(AttrOutcome.String(outcomeHandedBack))
		w.settle(c, consume.Retry(0, nil))
		return
	}
	pj := &processor.Job{
		Tenant: job.Tenant, GroupID: job.GroupID, JobID: job.JobID, Type: job.Type, Payload: job.Payload, Attempt: job.Attempt,
	}
	start := time.Now()
	var perr error
	var iso isolatedRun
	if w.exec != nil {
		iso = w.runIsolated(c, jobs.base, pj)
		perr = iso.perr
	} else {
		jctx, jcancel := context.WithTimeout(trace.ContextWithSpan(jobs.base, span), w.cfg.JobTimeout)
		perr = processor.Run(jctx, w.mux, pj)
		jcancel()
	}
	elapsed := time.Since(start)
	if c.free != nil && !c.suspect {
		c.free() // the processor is done; a suspect job keeps its slot, running alone
	}
	if !jobs.finish(d) { // handed back by the shutdown while it ran
		span.SetAttributes(AttrOutcome.String(outcomeHandedBack))
		w.abandoned(c)
		return
	}
	if w.refused(c, iso.soloCheck, "its executor process exited") {
		return
	}
	w.d.Metrics.ObserveProcessing(job.Type, elapsed)
	if perr != nil {
		span.RecordError(perr)
	}

	kind, after := processor.Classify(perr)
	w.countDestination(job, kind, after, perr)
	switch kind {
	case processor.OutcomeSuccess:
		w.publishResult(c, contracts.ResultSuccess, "", elapsed)
	case processor.OutcomeFailed:
		w.publishResult(c, contracts.ResultFailed, perr.Error(), elapsed)
	case processor.OutcomeRateLimited:
		// A 429 is not an error: it has a cap of its own and spends none of
		// the retry budget.
		if c.throttles >= w.cfg.MaxThrottles {
			w.publishResult(c, contracts.ResultFailed,
				fmt.Sprintf("rate limited %d times: %s", c.throttles+1, perr.Error()), elapsed)
			return
		}
		retryAfter := time.Duration(-1) // the congestion-aware backoff decides
		if after > 0 {
			retryAfter = after
		}
		w.backoff(c, telemetry.StatusRateLimited, retryAfter, perr.Error(), redisq.Throttled())
	default: // retry
		if failed := job.Attempt - 1 - c.throttles; failed >= w.cfg.MaxRetryCount {
			w.publishResult(c, contracts.ResultFailed, perr.Error(), elapsed)
			return
		}
		w.backoff(c, telemetry.StatusRetry, -1, perr.Error())
	}
}

// soloCheck says whether a suspect job may run alone once more: the zero
// value lets it run; otherwise a storage or executor error (err, in step),
// a stale claim, or a poison job (poison: the solo runs it was stopped in).
type soloCheck struct {
	step   string
	err    error
	stale  bool
	poison int
}

// soloRun counts a run of a suspect job alone ([redisq.Queue.SoloRun]): a
// job whose runs alone were stopped more than Config.MaxDeliveries times
// is a poison job.
func (w *Worker) soloRun(c claimed) soloCheck {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(c.Ctx), settleTimeout)
	defer cancel()
	n, current, err := w.d.Queue.SoloRun(sctx, c.job.Ref(), c.job.JobID, c.job.Attempt)
	switch {
	case err != nil:
		return soloCheck{step: "solo run", err: err}
	case !current:
		return soloCheck{stale: true}
	case n > w.cfg.MaxDeliveries:
		return soloCheck{poison: n - 1}
	}
	return soloCheck{}
}

// refused settles the delivery of a job s does not let run (a hand-back,
// an acknowledgement, or a poison job's FAILED result, whose error says
// what stopped its runs) and reports whether it did.
func (w *Worker) refused(c claimed, s soloCheck, stopped string) bool {
	switch {
	case s.err != nil:
		w.handBack(c, s.step, s.err)
	case s.stale:
		w.count(c, telemetry.StatusDropped)
		w.settle(c, consume.Ack())
	case s.poison > 0:
		w.publishResult(c, contracts.ResultFailed,
			fmt.Sprintf("poison: %s %d times while it ran alone", stopped, s.poison), 0)
	default:
		return false
	}
	return true
}

// isolatedRun is how a run in executor processes ended: with the
// processor's outcome (perr), or before one (soloCheck).
type isolatedRun struct {
	soloCheck
	perr error
}

// runIsolated runs job in an executor of the pool, which runs nothing else
// meanwhile. When the job is a suspect (its worker stopped while it ran)
// or its executor exited while it ran (a processor crashed it, or the
// executor was killed), each further run counts toward the job's poison
// budget first, as a solo run in the worker process does
// ([redisq.Queue.SoloRun]); a job whose executors exited in more than
// Config.MaxDeliveries of those runs is a poison job. Ending base cancels
// the processor's context.
func (w *Worker) runIsolated(c claimed, base context.Context, pj *processor.Job) isolatedRun {
	for solo := c.suspect; ; solo = true {
		if solo {
			if s := w.soloRun(c); s != (soloCheck{}) {
				return isolatedRun{soloCheck: s}
			}
		}
		perr, err := w.exec.run(trace.ContextWithSpan(base, c.Span), pj, w.cfg.JobTimeout)
		switch {
		case err == nil:
			return isolatedRun{perr: perr}
		case !errors.Is(err, errExecutorDied), base.Err() != nil: // base ended: stopping, handed back
			return isolatedRun{soloCheck: soloCheck{step: "executor", err: err}}
		}
		w.d.Metrics.ExecutorExits.Inc()
		w.log.Warn("the executor process exited while it ran the job: the job runs again, counted toward its poison budget",
			"tenant", pj.Tenant, "group", pj.GroupID, "job", pj.JobID, "attempt", pj.Attempt, "counted", solo)
	}
}

// publishResult publishes the attempt's result, waits for the PubAck and
// then acknowledges the READY message. Results of one group are gathered
// for up to [ResultLinger] and published together in one RESULT message
// ([results]); the message is acknowledged only after that message's
// PubAck. A failed publish hands the message back: the same attempt runs
// again, and the aggregator counts it once.
//
// A publish refused because RESULT is at its byte limit is not handed back
// (a re-run would spend a claim of the poison limit, and find RESULT just
// as full): the worker keeps the job, its READY message marked in
// progress, and publishes the result again after a wait that doubles from
// [minResultFullWait] to [maxResultFullWait] (at most a third of AckWait),
// until it is stored or the shutdown grace is over. The job takes a slot
// back meanwhile (when one is free), so a full RESULT stops the worker
// from taking more work.
func (w *Worker) publishResult(c claimed, status contracts.ResultStatus, errText string, elapsed time.Duration) {
	job := c.job
	res := contracts.JobResult{
		Tenant: job.Tenant, GroupID: job.GroupID, JobID: job.JobID, Attempt: job.Attempt,
		Status: status, Error: truncate(errText, maxErrorLen), DurationMs: elapsed.Milliseconds(),
	}
	wait := minResultFullWait
	held := false // a slot taken back while RESULT is full
	defer func() {
		if held {
			w.slots.Release(1)
		}
	}()
	for {
		err := w.results.publish(c.Ctx, job.Ref(), res, c.runner)
		if err == nil {
			break
		}
		if !natsutil.IsStreamFull(err) {
			w.handBack(c, "publish result", err)
			return
		}
		w.warn("RESULT is full: holding finished jobs and retrying their results until the aggregators make room",
			"tenant", job.Tenant, "group", job.GroupID, "job", job.JobID, "attempt", job.Attempt, "retryIn", wait)
		if wait == minResultFullWait {
			c.Span.AddEvent("RESULT full: result held")
		}
		if !held {
			held = w.slots.TryAcquire(1) == 1
		}
		_ = c.msg.Msg.InProgress()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			w.handBack(c, "publish result", err)
			return
		}
		wait = min(2*wait, maxResultFullWait, max(w.cfg.AckWait/3, minResultFullWait))
	}
	if status == contracts.ResultFailed {
		c.Span.SetStatus(codes.Error, res.Error)
	}
	w.count(c, string(status))
	// The result is stored: a lost ack only means a redelivery, which the
	// claim drops as stale (or, before the result is recorded, a re-run
	// whose result carries the same message id and is counted once).
	w.settle(c, consume.Ack())
}

// backoff sends the job back to the non-ready queue (retryAfter < 0 means
// the congestion-aware backoff) and acknowledges the READY message.
func (w *Worker) backoff(c claimed, status string, retryAfter time.Duration, errText string, opts ...redisq.RetryOption) {
	ctx, cancel := context.WithTimeout(c.Ctx, settleTimeout)
	defer cancel()
	job := c.job
	bctx, bspan := w.tracer.Start(ctx, SpanBackoff, trace.WithAttributes(
		AttrTenant.String(job.Tenant), AttrGroupID.String(job.GroupID), AttrJobID.String(job.JobID), AttrJobType.String(job.Type),
		AttrAttempt.Int(job.Attempt)))
	rr, err := w.d.Queue.Retry(bctx, job.Ref(), job.JobID, job.Attempt, retryAfter, truncate(errText, maxErrorLen), opts...)
	if err != nil {
		bspan.RecordError(err)
		bspan.SetStatus(codes.Error, err.Error())
		bspan.End()
		w.handBack(c, "back off", err)
		return
	}
	bspan.SetAttributes(AttrBackoffMs.Int64(rr.Delay.Milliseconds()), AttrOutcome.String(rr.Outcome))
	bspan.End()
	if rr.Outcome == "parked" {
		// The job left its group's in-flight count: wake idle fetchers, in
		// case the group waited at its in-flight limit.
		if w.d.NC != nil {
			_ = w.d.NC.Publish(w.d.Names.Notify("work"), nil)
		}
		w.d.Metrics.ObserveBackoff(rr.Delay)
	} else { // stale or cancelled: the job is no longer this delivery's
		status = telemetry.StatusDropped
	}
	w.count(c, status)
	w.settle(c, consume.Ack())
}

// Waits between publishes of a result that RESULT refused as full.
const (
	minResultFullWait = 50 * time.Millisecond
	maxResultFullWait = 5 * time.Second
)

// count records the delivery's outcome on the span and in
// bulk_action_job_results_total.
func (w *Worker) count(c claimed, status string) {
	if c.Span.IsRecording() { // the attributes' list is allocated even when not
		c.Span.SetAttributes(AttrOutcome.String(status))
	}
	w.d.Metrics.JobResults.WithLabelValues(c.job.Type, status).Inc()
}

// handBack hands the delivery back after a transient failure: the message
// is delivered again after nakDelay and the same attempt runs again.
func (w *Worker) handBack(c claimed, what string, err error) {
	c.Span.SetAttributes(AttrOutcome.String(outcomeHandedBack))
	w.warn("job handed back for redelivery", "step", what, "tenant", c.job.Tenant, "group", c.job.GroupID, "job", c.job.JobID,
		"attempt", c.job.Attempt, "err", err)
	w.settle(c, consume.Retry(nakDelay, fmt.Errorf("%s: %w", what, err)))
}

// settle records the decision on one job of a delivery and ends the job's
// span. The message is settled when its last job is: acknowledged, or
// handed back when any of its jobs was (the jobs that did finish are then
// dropped as stale when the message comes again).
func (w *Worker) settle(c claimed, dec consume.Decision) {
	m := c.msg
	if !dec.IsAck() && c.claims > 0 {
		// Handed back on purpose: its next claim is not a suspect.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Ctx), settleTimeout)
		if err := w.d.Queue.HandBack(ctx, redisq.Delivery{Group: c.job.Ref(), JobID: c.job.JobID, Attempt: c.job.Attempt}); err != nil {
			w.warn("hand-back not recorded; the job's next run will be alone", "err", err)
		}
		cancel()
	}
	if !dec.IsAck() {
		m.mu.Lock()
		if m.back == nil {
			m.back = &dec
		}
		m.mu.Unlock()
	}
	if c.ownSpan {
		if !dec.IsAck() && dec.Err() != nil {
			c.Span.RecordError(dec.Err())
		}
		c.Span.End()
	}
	if m.left.Add(-1) > 0 {
		return
	}
	if m.held != nil {
		m.held.unhold(m)
	}
	if m.gone.Load() { // the shutdown handed it back already
		m.Span.End()
		return
	}
	if m.back != nil {
		m.Decide(*m.back)
	} else {
		m.Decide(consume.Ack())
	}
	w.settleWithin(m.Delivery)
}

// abandoned ends a job whose message the shutdown already handed back: it
// is not settled again.
func (w *Worker) abandoned(c claimed) {
	if c.ownSpan {
		c.Span.End()
	}
	if c.msg.left.Add(-1) == 0 {
		if c.msg.held != nil {
			c.msg.held.unhold(c.msg)
		}
		c.msg.Span.End()
	}
}

// settleWithin settles d with its decision under settleTimeout.
func (w *Worker) settleWithin(d *consume.Delivery) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.Ctx), settleTimeout)
	defer cancel()
	w.settler.Settle(ctx, d)
	w.held.remove(d.Msg)
}

// warn logs at warn level, at most once per second; the lines left out in
// between are logged at debug level and counted in the next warn line.
func (w *Worker) warn(msg string, args ...any) {
	w.warnLimit.Warn(w.log, msg, args...)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}

// runAlone waits until the job that calls it is the only one running in
// this worker: one job at a time takes the lane, gives back its own slot
// while it waits (so two waiting jobs never hold each other's slots), then
// takes every slot. release gives back all but one, which the caller's own
// release returns. ok is false when ctx ended first.
func (w *Worker) runAlone(ctx context.Context) (release func(), ok bool) {
	w.slots.Release(1)
	select {
	case w.lane <- struct{}{}:
	case <-ctx.Done():
		_ = w.slots.Acquire(context.Background()) // the caller gives it back
		return nil, false
	}
	got := 0
	for got < w.cfg.Concurrency {
		if !w.slots.Acquire(ctx) {
			if got == 0 {
				_ = w.slots.Acquire(context.Background()) // the caller gives it back
				got = 1
			}
			w.slots.Release(got - 1)
			<-w.lane
			return nil, false
		}
		got++
	}
	return func() {
		w.slots.Release(got - 1)
		<-w.lane
	}, true
}
