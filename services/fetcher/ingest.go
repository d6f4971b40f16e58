package fetcher

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// SpanIngest is the name of the span of one submit message's ingestion, a
// child of the producer's submit span.
const SpanIngest = "bulkaction.ingest"

// AttrKind is the span attribute holding a submission's kind.
const AttrKind = attribute.Key("bulkaction.kind")

// item is one submit message of a batch.
type item struct {
	*consume.Delivery
	sub   *contracts.Submission // nil when the message is invalid
	trace string                // traceparent stored with the job
}

// ingest handles one batch (docs/ARCHITECTURE.md §6.1): decode, store in
// Redis in message order, then settle every message (dead letters first).
func (f *Fetcher) ingest(parent context.Context, msgs []jetstream.Msg) {
	// A batch that was received is finished even during shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	items := make([]*item, len(msgs))
	ds := make([]*consume.Delivery, len(msgs))
	for i, m := range msgs {
		it := &item{Delivery: consume.Open(ctx, f.tracer, SpanIngest, m)}
		sub, err := contracts.DecodeSubmission(m.Subject(), m.Data(), f.d.Limits)
		if err != nil {
			it.Decide(consume.DeadLetter(err))
		} else {
			it.sub = sub
			it.trace = handoff.Traceparent(it.Ctx)
			it.Span.SetAttributes(handoff.AttrGroupID.String(sub.GroupID), AttrKind.String(string(sub.Kind)))
			if sub.Kind == contracts.KindJob {
				it.Span.SetAttributes(handoff.AttrJobID.String(sub.JobID), handoff.AttrJobType.String(sub.Type))
			}
		}
		items[i], ds[i] = it, it.Delivery
	}
	added := f.store(ctx, items)
	if added > 0 {
		if err := f.d.NC.Publish(f.d.Names.Notify("work"), nil); err != nil {
			f.log.Debug("notify", "err", err)
		}
	}
	f.settler.Settle(ctx, ds...)
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
			it.Decide(consume.Retry(retryDelay, failed))
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
			it.Decide(consume.Retry(retryDelay, err))
		}
	}
	flush()
	if failed != nil {
		f.log.Warn("storing submissions failed; they will be redelivered", "err", failed, "delay", retryDelay)
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
			it.Decide(consume.Retry(retryDelay, err))
		}
		return 0, err
	}
	addedIn := map[string]int64{}
	for i, o := range res.Outcomes {
		it := items[i]
		it.Span.SetAttributes(attribute.String("bulkaction.enqueue.outcome", o.String()))
		switch o {
		case redisq.Added:
			f.d.Metrics.EnqueueTotal.Inc()
			addedIn[it.sub.GroupID]++
			added++
			it.Decide(consume.Ack())
		case redisq.Duplicate:
			f.d.Metrics.EnqueueDuplicateTotal.Inc()
			it.Decide(consume.Ack())
		case redisq.RejectedSealed:
			it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonOverTotal, Field: "jobId",
				Problem: fmt.Sprintf("new job %q of group %q", it.sub.JobID, it.sub.GroupID),
				Limit:   "the group is sealed and already has its declared number of jobs"}))
		case redisq.RejectedEnded:
			it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonGroupEnded, Field: "groupId",
				Problem: fmt.Sprintf("group %q was cancelled or completed", it.sub.GroupID),
				Limit:   "jobs are accepted until the group ends"}))
		default:
			it.Decide(consume.Retry(retryDelay, fmt.Errorf("unknown enqueue outcome %v", o)))
		}
	}
	for _, gid := range res.Created {
		f.publishEvent(ctx, events.Change{Group: gid,
			Counts: redisq.GroupCounts{State: contracts.StateCreated, Declared: -1, Jobs: addedIn[gid]}})
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
	it.Span.SetAttributes(attribute.String("bulkaction.seal.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.SealConflict, redisq.SealTooMany:
		problem := fmt.Sprintf("group %q is already sealed with total %d", it.sub.GroupID, res.Group.Declared)
		if res.Outcome == redisq.SealTooMany {
			problem = fmt.Sprintf("group %q already has %d distinct jobs", it.sub.GroupID, res.Group.Jobs)
		}
		it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonBadSeal, Field: "total",
			Problem: fmt.Sprintf("%d: %s", total, problem), Limit: "a group is sealed once, with at least the jobs it has"}))
		return nil
	case redisq.Sealed:
		switch {
		case res.Transition != "":
			c := res.Group
			c.State = res.Transition
			f.publishEvent(ctx, events.Change{Group: it.sub.GroupID, Counts: c, Ended: c.State.Terminal()})
		case res.Group.State == contracts.StateCreated && res.Group.Jobs == 0:
			// The seal came first and created the group.
			f.publishEvent(ctx, events.Change{Group: it.sub.GroupID, Counts: res.Group})
		}
	}
	it.Decide(consume.Ack())
	return nil
}

// cancel applies a cancel message; a non-nil error is a storage error.
func (f *Fetcher) cancel(ctx context.Context, it *item) error {
	res, err := f.d.Queue.Cancel(ctx, it.sub.GroupID)
	if err != nil {
		return err
	}
	it.Span.SetAttributes(attribute.String("bulkaction.cancel.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.Cancelled:
		c := res.Group
		c.State = contracts.StateCancelled
		f.publishEvent(ctx, events.Change{Group: it.sub.GroupID, Counts: c, Ended: true})
	default:
		f.log.Debug("cancel had no effect", "group", it.sub.GroupID, "outcome", string(res.Outcome))
	}
	it.Decide(consume.Ack())
	return nil
}

// publishEvent publishes a group event; a failure is logged (the state in
// Redis is what counts; the event stream is informational).
func (f *Fetcher) publishEvent(ctx context.Context, ch events.Change) {
	if err := f.d.Events.Publish(ctx, ch); err != nil {
		f.log.Warn("group event not published", "group", ch.Group, "state", string(ch.Counts.State), "err", err)
	}
}
