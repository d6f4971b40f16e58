package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/deadletter"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TracerName is the name of the tracer the aggregator's spans come from.
const TracerName = "github.com/bulkaction/bulkaction/services/aggregator"

// SpanRecord is the consumer span of recording one result, a child of the
// trace context the result message carries.
const SpanRecord = "bulkaction.record"

// Span attribute keys. The job attributes use the same keys as the spans
// of the other services.
const (
	// AttrGroupID is the result's group id.
	AttrGroupID = telemetry.AttrGroupID
	// AttrJobID is the result's job id.
	AttrJobID = telemetry.AttrJobID
	// AttrAttempt is the attempt the result belongs to.
	AttrAttempt = telemetry.AttrAttempt
	// AttrStatus is the result's status, SUCCESS or FAILED.
	AttrStatus = attribute.Key("bulkaction.status")
	// AttrOutcome is what recording did: recorded, duplicate or unknown
	// ([redisq.RecordOutcome]).
	AttrOutcome = attribute.Key("bulkaction.record.outcome")
	// AttrCompleted is true on the record span of the result that completed
	// its group.
	AttrCompleted = attribute.Key("bulkaction.group.completed")
)

// Defaults of [Config].
const (
	// DefaultBatchSize is the number of results fetched and recorded at once.
	DefaultBatchSize = 256
	// DefaultDurable is the name of the RESULT consumer.
	DefaultDurable = "aggregator"
	// DefaultStuckAfter is how long a running group may go without progress
	// before it is reported stuck.
	DefaultStuckAfter = 5 * time.Minute
	// DefaultStuckCheckEvery is the interval of the stuck check.
	DefaultStuckCheckEvery = 30 * time.Second
	// DefaultAckWait is the RESULT consumer's ack wait.
	DefaultAckWait = 30 * time.Second
	// ConsumerMaxAckPending is the least MaxAckPending of the RESULT
	// consumer; a BatchSize above it raises it.
	ConsumerMaxAckPending = 10000
)

const (
	// idleWait is how long a pull request waits for a result when the
	// consumer is empty; it also bounds how long stopping takes.
	idleWait = time.Second
	// nakDelay is the redelivery delay of results handed back after a
	// transient failure (Redis or NATS unavailable).
	nakDelay = time.Second
	// settleTimeout bounds each Redis or NATS call made for a batch; it does
	// not depend on Run's context, so a batch in progress is finished while
	// the aggregator stops.
	settleTimeout = 10 * time.Second
	// unknownLogEvery is how often a result of an unknown job is logged at
	// warn level; the others in between go to debug.
	unknownLogEvery = 10 * time.Second
)

// Config configures an [Aggregator]. The zero value is ready to use: every
// zero field means the default stated with it.
type Config struct {
	// BatchSize is the most results fetched and recorded (in one Redis round
	// trip) at once; 0 means [DefaultBatchSize] (256).
	BatchSize int
	// Durable is the name of the durable RESULT consumer, shared by every
	// aggregator instance; "" means [DefaultDurable] ("aggregator").
	Durable string
	// StuckAfter is how long a RUNNING or AGGREGATING group may go without a
	// recorded result (or, before its first one, since it started) before it
	// is reported stuck; 0 means [DefaultStuckAfter] (5 min).
	StuckAfter time.Duration
	// StuckCheckEvery is the interval of the stuck check; 0 means
	// [DefaultStuckCheckEvery] (30 s).
	StuckCheckEvery time.Duration
	// AckWait is the RESULT consumer's ack wait: results fetched by an
	// aggregator that dies before acknowledging them are delivered again
	// after it. 0 means [DefaultAckWait] (30 s).
	AckWait time.Duration
}

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.StuckAfter == 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.StuckCheckEvery == 0 {
		c.StuckCheckEvery = DefaultStuckCheckEvery
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
}

func (c *Config) validate() error {
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("aggregator: BatchSize %d: must be at least 1", c.BatchSize)
	case strings.ContainsAny(c.Durable, ".*> \t\r\n"):
		return fmt.Errorf("aggregator: Durable %q: must not contain '.', '*', '>' or white space", c.Durable)
	case c.StuckAfter < 0:
		return fmt.Errorf("aggregator: StuckAfter %s: must not be negative", c.StuckAfter)
	case c.StuckCheckEvery < 0:
		return fmt.Errorf("aggregator: StuckCheckEvery %s: must not be negative", c.StuckCheckEvery)
	case c.AckWait < 100*time.Millisecond:
		return fmt.Errorf("aggregator: AckWait %s: must be at least 100ms", c.AckWait)
	}
	return nil
}

// Aggregator records job results into their groups. Create it with [New]
// and start it with [Aggregator.Run]; an Aggregator runs once.
type Aggregator struct {
	cfg    Config
	d      deps.Deps
	log    *slog.Logger
	tracer trace.Tracer

	unknownLog telemetry.WarnLimiter
	warnLimit  telemetry.WarnLimiter // dead letters and hand-backs

	mu         sync.Mutex
	progressed map[string]struct{} // groups with recorded results, for the watch list

	// afterRecord, when set, runs after each RecordBatch; returning true
	// abandons the batch there (no events, no acknowledgements), as if the
	// process had died. Tests only.
	afterRecord func() bool
}

// New returns an Aggregator. cfg's zero fields take the defaults documented
// on [Config]; d.JS and d.Queue are required and d's other fields default
// as [deps.Deps.Fill] says.
func New(cfg Config, d deps.Deps) (*Aggregator, error) {
	if d.JS == nil || d.Queue == nil {
		return nil, errors.New("aggregator: deps JS and Queue are required")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d = d.Fill()
	return &Aggregator{
		cfg:        cfg,
		d:          d,
		log:        d.Log.With("service", "aggregator"),
		tracer:     d.TracerProvider.Tracer(TracerName),
		unknownLog: telemetry.WarnLimiter{Interval: unknownLogEvery},
		warnLimit:  telemetry.WarnLimiter{Interval: time.Second},
		progressed: map[string]struct{}{},
	}, nil
}

// Config returns the aggregator's configuration with the defaults filled in.
func (a *Aggregator) Config() Config { return a.cfg }

// Run creates or updates the RESULT consumer and records results until ctx
// ends; it finishes the batch in progress and returns nil. It returns an
// error only when the consumer cannot be set up before ctx ends.
func (a *Aggregator) Run(ctx context.Context) error {
	cons, err := a.d.JS.CreateOrUpdateConsumer(ctx, a.d.Names.StreamResult(), jetstream.ConsumerConfig{
		Durable:       a.cfg.Durable,
		Description:   "bulkaction aggregators",
		FilterSubject: a.d.Names.ResultAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       a.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: max(a.cfg.BatchSize, ConsumerMaxAckPending),
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("aggregator: consumer %s: %w", a.cfg.Durable, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.watchStuck(ctx) })
	a.log.Info("aggregator started", "batch", a.cfg.BatchSize)

	idle := true
	for ctx.Err() == nil {
		msgs, err := a.fetch(cons, idle)
		if len(msgs) > 0 {
			a.process(ctx, msgs)
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("pull from RESULT failed", "err", err)
			t := time.NewTimer(nakDelay)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		idle = len(msgs) == 0
	}
	wg.Wait()
	a.log.Info("aggregator stopped")
	return nil
}

// fetch pulls the next batch. With no work waiting (idle) it waits for one
// result and then takes what else is there; otherwise it takes what is
// there without waiting.
func (a *Aggregator) fetch(cons jetstream.Consumer, idle bool) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	collect := func(b jetstream.MessageBatch, err error) error {
		if err != nil {
			return err
		}
		for m := range b.Messages() {
			msgs = append(msgs, m)
		}
		return b.Error()
	}
	if idle {
		if err := collect(cons.Fetch(1, jetstream.FetchMaxWait(idleWait))); err != nil || len(msgs) == 0 || a.cfg.BatchSize == 1 {
			return msgs, err
		}
		return msgs, collect(cons.FetchNoWait(a.cfg.BatchSize - 1))
	}
	return msgs, collect(cons.FetchNoWait(a.cfg.BatchSize))
}

// item is one valid result of a batch.
type item struct {
	msg  jetstream.Msg
	res  *contracts.JobResult
	span trace.Span
}

// process records one batch and acknowledges it (DESIGN §6.4).
func (a *Aggregator) process(ctx context.Context, msgs []jetstream.Msg) {
	base := context.WithoutCancel(ctx)
	items := make([]item, 0, len(msgs))
	results := make([]contracts.JobResult, 0, len(msgs))
	for _, m := range msgs {
		r, err := contracts.DecodeJobResult(m.Data())
		if err == nil {
			if gid, ok := a.d.Names.GroupFromSubject(m.Subject()); !ok || gid != r.GroupID {
				err = &contracts.ValidationError{Reason: contracts.ReasonSubjectMismatch, Field: "groupId",
					Problem: fmt.Sprintf("%q does not match subject %q", r.GroupID, m.Subject()),
					Limit:   "must equal the <groupId> token of <prefix>.result.<groupId>"}
			}
		}
		if err != nil {
			a.deadLetter(base, m, err)
			continue
		}
		_, span := a.tracer.Start(telemetry.ExtractHeader(base, m.Headers()), SpanRecord,
			trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(
				AttrGroupID.String(r.GroupID), AttrJobID.String(r.JobID), AttrAttempt.Int(r.Attempt),
				AttrStatus.String(string(r.Status)),
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", m.Subject()),
			)
		}
		items = append(items, item{msg: m, res: r, span: span})
		results = append(results, *r)
	}
	if len(items) == 0 {
		return
	}

	rctx, cancel := context.WithTimeout(base, settleTimeout)
	recs, err := a.d.Queue.RecordBatch(rctx, results)
	cancel()
	if err != nil {
		a.warn("recording results failed; batch handed back", "results", len(items), "err", err)
		for _, it := range items {
			endWithError(it.span, err)
			_ = it.msg.NakWithDelay(nakDelay)
		}
		return
	}
	if a.afterRecord != nil && a.afterRecord() {
		for _, it := range items {
			it.span.End()
		}
		return
	}

	// Events to publish: one per group, with its counts after the batch.
	events := map[string]redisq.GroupCounts{}
	var order []string
	event := func(gid string, c redisq.GroupCounts) {
		if _, ok := events[gid]; !ok {
			order = append(order, gid)
		}
		events[gid] = c
	}
	now := time.Now()
	m := a.d.Metrics
	for i, rec := range recs {
		it := items[i]
		gid := it.res.GroupID
		it.span.SetAttributes(AttrOutcome.String(string(rec.Outcome)), AttrCompleted.Bool(rec.Completed))
		switch rec.Outcome {
		case redisq.Recorded:
			m.RecordedResults.WithLabelValues(string(it.res.Status)).Inc()
			if rec.CreatedAtMs > 0 {
				m.ObserveSubmitLatency(max(now.Sub(time.UnixMilli(rec.CreatedAtMs)), 0))
			}
			if rec.Completed {
				m.GroupCompletions.WithLabelValues(telemetry.StateCompleted).Inc()
				event(gid, rec.Group)
			} else {
				a.noteProgress(gid)
			}
		case redisq.DuplicateResult:
			m.RecordedResults.WithLabelValues(telemetry.StatusDuplicate).Inc()
			if rec.Group.State.Terminal() {
				event(gid, rec.Group)
			}
		default: // redisq.UnknownJob
			m.RecordedResults.WithLabelValues(telemetry.StatusDropped).Inc()
			a.logUnknown(it.res, rec.Outcome)
		}
	}

	failed := map[string]error{}
	for _, gid := range order {
		pctx, cancel := context.WithTimeout(base, settleTimeout)
		if err := a.d.Events.Publish(pctx, gid, events[gid]); err != nil {
			failed[gid] = err
			a.log.Warn("group event not published; its results handed back", "group", gid,
				"state", string(events[gid].State), "err", err)
		}
		cancel()
	}
	for _, it := range items {
		if err := failed[it.res.GroupID]; err != nil {
			endWithError(it.span, err)
			_ = it.msg.NakWithDelay(nakDelay)
			continue
		}
		// A lost ack means a redelivery, which records as a duplicate.
		_ = it.msg.Ack()
		it.span.End()
	}
}

// noteProgress remembers a group with a recorded result, to be put on the
// stuck watch list by the next stuck check.
func (a *Aggregator) noteProgress(gid string) {
	a.mu.Lock()
	a.progressed[gid] = struct{}{}
	a.mu.Unlock()
}

// logUnknown logs a result of a job Redis does not know: at warn level at
// most once per unknownLogEvery, at debug level otherwise.
func (a *Aggregator) logUnknown(r *contracts.JobResult, outcome redisq.RecordOutcome) {
	a.unknownLog.Warn(a.log, "result of an unknown job dropped",
		"group", r.GroupID, "job", r.JobID, "attempt", r.Attempt, "outcome", string(outcome))
}

// deadLetter sends a message that is not a valid result to the DLQ and
// terminates it; if the DLQ is not reachable the message is handed back.
func (a *Aggregator) deadLetter(ctx context.Context, msg jetstream.Msg, cause error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	reason, err := deadletter.Send(ctx, a.d, msg, cause, nakDelay)
	if err != nil {
		a.warn("dead-lettering failed; message handed back", "subject", msg.Subject(), "err", err)
		return
	}
	a.warn("invalid result dead-lettered", "subject", msg.Subject(), "reason", reason, "err", cause)
}

// warn logs at warn level, at most once per second; the lines left out in
// between are logged at debug level and counted in the next warn line.
func (a *Aggregator) warn(msg string, args ...any) {
	a.warnLimit.Warn(a.log, msg, args...)
}

func endWithError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.End()
}
