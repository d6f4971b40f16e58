package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TracerName is the name of the tracer the hand-off spans come from.
const TracerName = "github.com/bulkaction/bulkaction/internal/handoff"

// Span names of the three hand-offs.
const (
	// SpanAdmit is the span of a job admitted by the fetcher.
	SpanAdmit = "bulkaction.admit"
	// SpanRelease is the span of a job released from the non-ready queue by the dispatcher.
	SpanRelease = "bulkaction.release"
	// SpanReclaim is the span of a job re-published by the dispatcher after its lease expired.
	SpanReclaim = "bulkaction.reclaim"
)

// Span attribute keys set on every hand-off span.
const (
	// AttrTenant is the tenant of the job's group (the same key as the client's).
	AttrTenant = telemetry.AttrTenant
	// AttrGroupID is the job's group id (the same key as the client's).
	AttrGroupID = telemetry.AttrGroupID
	// AttrJobID is the job's id within its group.
	AttrJobID = telemetry.AttrJobID
	// AttrJobType is the job's type, the last token of its READY subject.
	AttrJobType = telemetry.AttrJobType
	// AttrAttempt is the attempt the READY message carries (1 first).
	AttrAttempt = telemetry.AttrAttempt
	// AttrDecision is the admission decision of an admitted job (see
	// [DecisionReady]); only admit spans carry it.
	AttrDecision = attribute.Key("bulkaction.admit.decision")
)

// DecisionReady is the [AttrDecision] of a job the rate gate let straight through to READY.
const DecisionReady = "ready"

// confirmTimeout bounds the Confirm call made after the PubAcks; it does not
// depend on the caller's context so that a shutdown between publish and
// confirm does not leave published jobs to be re-published.
const confirmTimeout = 10 * time.Second

// Packing says how [Publish] packs jobs into READY messages.
type Packing struct {
	// Jobs is the most jobs of one type a message carries (0 or less:
	// [DefaultPackJobs]; 1: one job per message).
	Jobs int
	// Spread is the fewest messages the jobs of one type are spread over
	// while they are as many: the worker slots of every worker instance.
	// A worker pulls one message per free slot, so a round of few jobs
	// packed into fewer messages than there are slots would leave slots,
	// or whole workers, idle while the jobs of one pack wait for a slot of
	// the worker that pulled it. 0: no spreading.
	Spread int
}

// Publish hands jobs to READY: for each job it starts a span named span
// (a child of the job's stored traceparent, with the group id, job id, type,
// attempt and any extra attrs), packs the jobs of each type into
// [contracts.ReadyBatch] messages as p says ([Packing]; never more bytes
// than the message limit, see [packs]), publishes each to
// d.Names.ReadyPack(type, jobs) with Nats-Msg-Id [contracts.ReadyBatch.MsgID] (the
// job's [contracts.ReadyMsgID] for a pack of one, a digest of the members'
// ids and attempts for more, so a re-publish of the same pack is
// deduplicated), waits for every PubAck and then confirms the published
// jobs with one [redisq.Queue.Confirm] call, giving each the READY sequence
// of its pack ([redisq.LeasedJob.ReadySeq]). Packing takes only the jobs in
// hand: nothing waits for more. The subject names the pack's job count,
// which every [Room] counts while the pack is on READY.
//
// Trace context: the ready job carries no trace field, so a pack's
// traceparent header is its first job's span, and [HeaderJobTraceparent]
// lists every job's span, in the order of the jobs (a worker parents each
// job's span on its own entry).
//
// A PubAck that reports a duplicate (the message id was used within the
// stream's duplicate window) counts as published only while the message it
// duplicates is still on READY: the normal case, a re-publish of a lease
// that expired before it was confirmed. When that message is gone, it was
// consumed, and the hand-out that published it was lost (Redis lost recent
// writes, docs/ARCHITECTURE.md §6.2): the same attempts would never reach a
// worker again. The pack's jobs are then leased again as new attempts
// ([redisq.Queue.Relet]: only those still leased as the attempt published;
// one that moved on is left alone) and published, packed again, under the
// new attempts' message ids, at most [maxRelets] times.
//
// It returns the jobs it confirmed, in the order of jobs, with the attempt
// they were published as. A job that was not published is left leased, to
// be re-published once its lease expires; err then reports how many failed
// and the first failure. If the Confirm call fails, ok is nil and err says
// so: the jobs are on READY and their leases expire into a re-publish with
// the same message id. d.JS, d.Queue are required; a nil d.TracerProvider
// means the global provider.
func Publish(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, p Packing, span string, attrs ...attribute.KeyValue) (ok []redisq.LeasedJob, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if p.Jobs <= 0 {
		p.Jobs = DefaultPackJobs
	}
	jobs = slices.Clone(jobs) // attempts and sequences are set on the copies
	tp := d.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(TracerName)
	spans := make([]trace.Span, len(jobs))
	ctxs := make([]context.Context, len(jobs))
	var failed int
	var first error
	fail := func(i int, e error) {
		failed++
		if first == nil {
			first = fmt.Errorf("%s/%s attempt %d: %w", jobs[i].Group, jobs[i].ID, jobs[i].Attempt, e)
		}
		spans[i].RecordError(e)
		spans[i].SetStatus(codes.Error, e.Error())
	}
	pending := make([]int, len(jobs)) // jobs index of each job to publish in a round
	// the span of a job without a trace of its own when spans record
	// nothing (telemetry.Untraced): looked up once, not per job
	base, untraced := telemetry.Untraced(ctx, tracer)
	for i, j := range jobs {
		subject := d.Names.Ready(j.Type)
		sctx, sp := ctx, base
		if j.Trace != "" || !untraced {
			sctx, sp = telemetry.StartMessageSpan(parentContext(ctx, j.Trace), tracer, span, trace.SpanKindProducer, subject)
		}
		if sp.IsRecording() {
			sp.SetAttributes(AttrTenant.String(j.Group.Tenant), AttrGroupID.String(j.Group.ID), AttrJobID.String(j.ID), AttrJobType.String(j.Type),
				AttrAttempt.Int(j.Attempt))
			sp.SetAttributes(attrs...)
		}
		spans[i], ctxs[i] = sp, sctx
		pending[i] = i
	}
	limit := packLimit(d)
	published := make([]bool, len(jobs))
	alone := make([]bool, len(jobs)) // in a pack the stream refused as too large: one job per message now
	var stream jetstream.Stream      // READY, looked up at the first duplicate
	for relets := 0; len(pending) > 0; {
		items := make([][]byte, len(jobs)) // encoded ready job of each pending job
		var encoded []int
		for _, i := range pending {
			b, err := readyItem(jobs[i])
			if err != nil {
				fail(i, err)
				continue
			}
			items[i] = b
			encoded = append(encoded, i)
		}
		ps := packs(jobs, items, encoded, alone, p, limit)
		msgs := make([]*nats.Msg, len(ps))
		for k, p := range ps {
			msgs[k] = readyMsg(d, jobs, items, ctxs, p)
		}
		acks, errs := publishAcks(ctx, d.JS, msgs)
		var gone []redisq.LeasedJob // jobs of duplicates of messages no longer on READY
		var split []int             // jobs of packs too large for the stream, to publish alone
		for k, e := range errs {
			p := ps[k]
			if len(p) > 1 && tooLarge(e) {
				// The stream's message limit is below the one packs are
				// cut to (d.Limits): each job goes alone, as before packs.
				for _, i := range p {
					alone[i] = true
				}
				split = append(split, p...)
				continue
			}
			if e == nil && acks[k].Duplicate {
				e = stillOnReady(ctx, d, &stream, acks[k].Sequence)
				if errors.Is(e, errConsumed) {
					if relets < maxRelets {
						for _, i := range p {
							gone = append(gone, jobs[i])
						}
						continue
					}
					e = fmt.Errorf("message id still a duplicate after %d new attempts: %w", maxRelets, e)
				}
			}
			if e != nil {
				for _, i := range p {
					fail(i, e)
				}
				continue
			}
			for _, i := range p {
				published[i] = true
				jobs[i].ReadySeq = acks[k].Sequence
				if len(p) > 1 && spans[i].IsRecording() {
					spans[i].SetAttributes(AttrPackSize.Int(len(p)))
				}
			}
		}
		pending = append(pending[:0], split...)
		if len(gone) == 0 {
			continue
		}
		relets++
		relet, err := d.Queue.Relet(ctx, gone)
		if err != nil {
			for _, j := range gone {
				fail(indexOf(jobs, j), err)
			}
			continue
		}
		for _, j := range relet {
			i := indexOf(jobs, j)
			spans[i].AddEvent("relet", trace.WithAttributes(AttrAttempt.Int(j.Attempt)))
			spans[i].SetAttributes(AttrAttempt.Int(j.Attempt))
			jobs[i] = j
			pending = append(pending, i)
		}
		// a job left out of relet moved on (claimed, cancelled, put back):
		// it is neither published nor confirmed by this call
	}
	for i, j := range jobs {
		if published[i] {
			ok = append(ok, j)
		}
	}
	if len(ok) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
		cerr := d.Queue.Confirm(cctx, ok...)
		cancel()
		if cerr != nil {
			for i := range jobs {
				if published[i] {
					spans[i].RecordError(cerr)
					spans[i].SetStatus(codes.Error, cerr.Error())
				}
			}
			endAll(spans)
			return nil, fmt.Errorf("handoff: confirm %d published jobs: %w", len(ok), cerr)
		}
	}
	endAll(spans)
	if failed > 0 {
		return ok, fmt.Errorf("handoff: %d of %d jobs not published, first %w", failed, len(jobs), first)
	}
	return ok, nil
}

// indexOf is the index in jobs of job j (by group and id).
func indexOf(jobs []redisq.LeasedJob, j redisq.LeasedJob) int {
	return slices.IndexFunc(jobs, func(x redisq.LeasedJob) bool { return x.Group == j.Group && x.ID == j.ID })
}

// maxRelets bounds how many new attempts one Publish call gives a job whose
// message id turns out to be a duplicate of a consumed message.
const maxRelets = 3

// errConsumed: a publish was a duplicate of a message no longer on READY.
var errConsumed = errors.New("duplicate of a message no longer on READY")

// stillOnReady checks the message a duplicate PubAck names (its sequence):
// nil while it is on READY, errConsumed when it is gone, another error when
// READY cannot tell. *stream caches the READY stream.
func stillOnReady(ctx context.Context, d deps.Deps, stream *jetstream.Stream, seq uint64) error {
	if *stream == nil {
		st, err := d.JS.Stream(ctx, d.Names.StreamReady())
		if err != nil {
			return fmt.Errorf("READY: %w", err)
		}
		*stream = st
	}
	_, err := (*stream).GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return errConsumed
	case err != nil:
		return fmt.Errorf("READY message %d: %w", seq, err)
	}
	return nil
}

// publishAcks publishes msgs asynchronously and waits for every PubAck (or
// for ctx to end): one PubAck or error per message, in order. It is
// [natsutil.PublishAll] returning the PubAcks, whose sequences and
// duplicate flags Publish needs.
func publishAcks(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) ([]*jetstream.PubAck, []error) {
	acks := make([]*jetstream.PubAck, len(msgs))
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	settle := func(k int) {
		f := futures[k]
		if f == nil {
			return
		}
		futures[k] = nil
		select { // an outcome already known wins over an ended ctx
		case a := <-f.Ok():
			acks[k] = a
			return
		case e := <-f.Err():
			errs[k] = e
			return
		default:
		}
		select {
		case a := <-f.Ok():
			acks[k] = a
		case e := <-f.Err():
			errs[k] = e
		case <-ctx.Done():
			errs[k] = ctx.Err()
		}
	}
	oldest := 0
	for k, m := range msgs {
		if err := ctx.Err(); err != nil {
			errs[k] = err
			continue
		}
		for {
			f, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
				// the handle's window is full: make room by settling ours
				if oldest < k {
					settle(oldest)
					oldest++
				}
				continue
			}
			if err != nil {
				errs[k] = err
			} else {
				futures[k] = f
			}
			break
		}
	}
	for k := range msgs {
		settle(k)
	}
	return acks, errs
}
