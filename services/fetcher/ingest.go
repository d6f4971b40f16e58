package fetcher

import (
	"context"
	"fmt"

	"github.com/bulkaction/bulkaction/internal/deadletter"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// SpanIngest is the name of the span of one submit message's ingestion, a
// child of the producer's submit span.
const SpanIngest = "bulkaction.ingest"

// AttrKind is the span attribute holding a submission's kind.
const AttrKind = attribute.Key("bulkaction.kind")

// fate is what becomes of a submit message once its batch is handled.
type fate int

const (
	fateNone fate = iota // not decided yet
	fateAck              // stored in Redis (or a harmless no-op)
	fateDLQ              // rejected: dead-letter it, then Term
	fateNak              // not stored: redeliver after retryDelay
)

// item is one submit message of a batch.
type item struct {
	msg   jetstream.Msg
	sub   *contracts.Submission // nil when the message is invalid
	span  trace.Span
	trace string // traceparent stored with the job
	fate  fate
	err   error // the rejection (fateDLQ) or the storage error (fateNak)
}

func (it *item) ack() { it.fate = fateAck }

func (it *item) reject(err error) { it.fate, it.err = fateDLQ, err }

func (it *item) nak(err error) { it.fate, it.err = fateNak, err }

// ingestLoop takes the messages the pump delivers in batches of up to
// IngestBatchSize (what is available, without waiting for more) until the
// pump closes in.
func (f *Fetcher) ingestLoop(ctx context.Context, in <-chan jetstream.Msg) {
	batch := make([]jetstream.Msg, 0, f.cfg.IngestBatchSize)
	for {
		m, ok := <-in
		if !ok {
			return
		}
		batch = append(batch[:0], m)
	fill:
		for len(batch) < f.cfg.IngestBatchSize {
			select {
			case m, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		f.ingest(ctx, batch)
	}
}

// ingest handles one batch: decode, store in Redis in message order,
// dead-letter the rejected messages, then settle every message.
func (f *Fetcher) ingest(parent context.Context, msgs []jetstream.Msg) {
	// A batch that was received is finished even during shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	items := make([]*item, len(msgs))
	for i, m := range msgs {
		it := &item{msg: m}
		mctx, span := f.tracer.Start(telemetry.ExtractHeader(ctx, m.Headers()), SpanIngest,
			trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", m.Subject()),
			)
		}
		it.span = span
		sub, err := contracts.DecodeSubmission(m.Subject(), m.Data(), f.d.Limits)
		if err != nil {
			it.reject(err)
		} else {
			it.sub = sub
			it.trace = handoff.Traceparent(mctx)
			span.SetAttributes(handoff.AttrGroupID.String(sub.GroupID), AttrKind.String(string(sub.Kind)))
			if sub.Kind == contracts.KindJob {
				span.SetAttributes(handoff.AttrJobID.String(sub.JobID), handoff.AttrJobType.String(sub.Type))
			}
		}
		items[i] = it
	}
	added := f.store(ctx, items)
	if added > 0 {
		if err := f.d.NC.Publish(f.d.Names.Notify("work"), nil); err != nil {
			f.log.Debug("fetcher: notify", "err", err)
		}
	}
	f.deadLetter(ctx, items)
	f.settle(items)
}

// store applies the valid submissions of items to Redis in message order:
// consecutive jobs go in one EnqueueJobs call, and a seal or cancel is
// applied after the jobs before it. After a Redis error the remaining
// messages are not applied (they are redelivered, keeping their order
// behind the failed one). It returns the number of jobs newly enqueued.
func (f *Fetcher) store(ctx context.Context, items []*item) (added int) {
	var pending []*item
	var failed error
	flush := func() {
		if len(pending) == 0 {
			return
		}
		n, err := f.enqueue(ctx, pending)
		added += n
		if err != nil {
			failed = err
		}
		pending = pending[:0]
	}
	for _, it := range items {
		if it.sub == nil {
			continue // invalid: already rejected
		}
		if failed == nil && it.sub.Kind != contracts.KindJob {
			flush()
		}
		if failed != nil {
			it.nak(failed)
			continue
		}
		var err error
		switch it.sub.Kind {
		case contracts.KindJob:
			pending = append(pending, it)
		case contracts.KindSeal:
			err = f.seal(ctx, it)
		case contracts.KindCancel:
			err = f.cancel(ctx, it)
		}
		if err != nil {
			failed = err
			it.nak(err)
		}
	}
	flush()
	if failed != nil {
		f.log.Warn("fetcher: storing submissions failed; they will be redelivered", "err", failed, "delay", retryDelay)
	}
	return added
}

// enqueue stores the jobs of items in one call and decides their fates. On
// a Redis error every item is negatively acknowledged.
func (f *Fetcher) enqueue(ctx context.Context, items []*item) (added int, err error) {
	jobs := make([]redisq.Job, len(items))
	for i, it := range items {
		s := it.sub
		jobs[i] = redisq.Job{
			GroupID: s.GroupID, ID: s.JobID, Type: s.Type, Payload: s.Payload,
			Priority: s.Priority, BasePriority: s.BasePriority, Trace: it.trace,
		}
	}
	res, err := f.d.Queue.EnqueueJobs(ctx, jobs)
	if err != nil {
		for _, it := range items {
			it.nak(err)
		}
		return 0, err
	}
	addedIn := map[string]int64{}
	for i, o := range res.Outcomes {
		it := items[i]
		it.span.SetAttributes(attribute.String("bulkaction.enqueue.outcome", o.String()))
		switch o {
		case redisq.Added:
			f.d.Metrics.EnqueueTotal.Inc()
			addedIn[it.sub.GroupID]++
			added++
			it.ack()
		case redisq.Duplicate:
			f.d.Metrics.EnqueueDuplicateTotal.Inc()
			it.ack()
		case redisq.RejectedSealed:
			it.reject(&contracts.ValidationError{Reason: ReasonOverTotal, Field: "jobId",
				Problem: fmt.Sprintf("new job %q of group %q", it.sub.JobID, it.sub.GroupID),
				Limit:   "the group is sealed and already has its declared number of jobs"})
		case redisq.RejectedEnded:
			it.reject(&contracts.ValidationError{Reason: ReasonGroupEnded, Field: "groupId",
				Problem: fmt.Sprintf("group %q was cancelled or completed", it.sub.GroupID),
				Limit:   "jobs are accepted until the group ends"})
		default:
			it.nak(fmt.Errorf("fetcher: unknown enqueue outcome %v", o))
		}
	}
	for _, gid := range res.Created {
		f.publishEvent(ctx, gid, redisq.GroupCounts{State: contracts.StateCreated, Declared: -1, Jobs: addedIn[gid]})
	}
	return added, nil
}

// seal applies a seal message; a non-nil error is a storage error.
func (f *Fetcher) seal(ctx context.Context, it *item) error {
	var total int64
	if it.sub.Total != nil {
		total = *it.sub.Total
	}
	res, err := f.d.Queue.Seal(ctx, it.sub.GroupID, total)
	if err != nil {
		return err
	}
	it.span.SetAttributes(attribute.String("bulkaction.seal.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.SealConflict, redisq.SealTooMany:
		problem := fmt.Sprintf("group %q is already sealed with total %d", it.sub.GroupID, res.Group.Declared)
		if res.Outcome == redisq.SealTooMany {
			problem = fmt.Sprintf("group %q already has %d distinct jobs", it.sub.GroupID, res.Group.Jobs)
		}
		it.reject(&contracts.ValidationError{Reason: ReasonBadSeal, Field: "total",
			Problem: fmt.Sprintf("%d: %s", total, problem), Limit: "a group is sealed once, with at least the jobs it has"})
		return nil
	case redisq.Sealed:
		switch {
		case res.Transition != "":
			c := res.Group
			c.State = res.Transition
			f.publishEvent(ctx, it.sub.GroupID, c)
			if res.Transition == contracts.StateCompleted {
				f.d.Metrics.GroupCompletions.WithLabelValues(telemetry.StateCompleted).Inc()
			}
		case res.Group.State == contracts.StateCreated && res.Group.Jobs == 0:
			// The seal came first and created the group.
			f.publishEvent(ctx, it.sub.GroupID, res.Group)
		}
	}
	it.ack()
	return nil
}

// cancel applies a cancel message; a non-nil error is a storage error.
func (f *Fetcher) cancel(ctx context.Context, it *item) error {
	res, err := f.d.Queue.Cancel(ctx, it.sub.GroupID)
	if err != nil {
		return err
	}
	it.span.SetAttributes(attribute.String("bulkaction.cancel.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.Cancelled:
		c := res.Group
		c.State = contracts.StateCancelled
		f.publishEvent(ctx, it.sub.GroupID, c)
		f.d.Metrics.GroupCompletions.WithLabelValues(telemetry.StateCancelled).Inc()
	default:
		f.log.Debug("fetcher: cancel had no effect", "group", it.sub.GroupID, "outcome", string(res.Outcome))
	}
	it.ack()
	return nil
}

// deadLetter publishes the rejected messages of items to the DLQ in one
// batch and waits for the PubAcks; a message whose dead letter was not
// stored is negatively acknowledged instead of terminated.
func (f *Fetcher) deadLetter(ctx context.Context, items []*item) {
	var rejected []*item
	var msgs []*nats.Msg
	for _, it := range items {
		if it.fate != fateDLQ {
			continue
		}
		m, _, err := deadletter.Message(f.d.Names, it.msg, it.err)
		if err != nil {
			it.nak(err)
			continue
		}
		rejected = append(rejected, it)
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return
	}
	var failed int
	for i, err := range natsutil.PublishAll(ctx, f.d.JS, msgs) {
		it := rejected[i]
		if err != nil {
			failed++
			it.nak(fmt.Errorf("dead-letter %s: %w", contracts.Reason(it.err), err))
			continue
		}
		f.d.Metrics.DeadLetters.WithLabelValues(contracts.Reason(it.err)).Inc()
	}
	if failed > 0 {
		f.log.Warn("fetcher: dead-lettering failed; the messages will be redelivered", "failed", failed, "of", len(msgs))
	}
}

// settle acknowledges, terminates or negatively acknowledges every message
// according to its fate, and ends the spans.
func (f *Fetcher) settle(items []*item) {
	for _, it := range items {
		var err error
		switch it.fate {
		case fateAck:
			err = it.msg.Ack()
		case fateDLQ:
			it.span.SetStatus(codes.Error, "rejected: "+contracts.Reason(it.err))
			err = it.msg.Term()
		default:
			it.span.RecordError(it.err)
			it.span.SetStatus(codes.Error, "not stored")
			err = it.msg.NakWithDelay(retryDelay)
		}
		if err != nil {
			f.log.Debug("fetcher: settle submit message", "err", err)
		}
		it.span.End()
	}
}

// publishEvent publishes a group event; a failure is logged (the state in
// Redis is what counts; the event stream is informational).
func (f *Fetcher) publishEvent(ctx context.Context, gid string, c redisq.GroupCounts) {
	if err := f.d.Events.Publish(ctx, gid, c); err != nil {
		f.log.Warn("fetcher: group event", "group", gid, "state", string(c.State), "err", err)
	}
}
