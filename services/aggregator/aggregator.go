package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/setting"
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
	// AttrTenant is the tenant of the result's group.
	AttrTenant = telemetry.AttrTenant
	// AttrGroupID is the result's group id.
	AttrGroupID = telemetry.AttrGroupID
	// AttrResultCount is the number of results the message carries (the
	// other attributes are its first result's).
	AttrResultCount = attribute.Key("bulkaction.result_count")
	// AttrJobID is the result's job id.
	AttrJobID = telemetry.AttrJobID
	// AttrAttempt is the attempt the result belongs to.
	AttrAttempt = telemetry.AttrAttempt
	// AttrStatus is the result's status, SUCCESS or FAILED.
	AttrStatus = attribute.Key("bulkaction.status")
	// AttrOutcome is what recording did: recorded, duplicate, fenced or
	// unknown ([redisq.RecordOutcome]).
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
	// [DefaultStuckCheckEvery] (30 s), or a fifth of StuckAfter when that
	// is shorter.
	StuckCheckEvery time.Duration
	// GroupIdleTTL is how long an unsealed group may go without activity
	// before the stuck check abandons it ([redisq.Queue.AbandonIdle]: it
	// leaves the stuck watch and its keys get GROUP_TTL); 0 means
	// [redisq.DefaultGroupIdleTTL] (7 days).
	GroupIdleTTL time.Duration
	// AckWait is the RESULT consumer's ack wait: results fetched by an
	// aggregator that dies before acknowledging them are delivered again
	// after it. 0 means [DefaultAckWait] (30 s).
	AckWait time.Duration
	// CallbackAllowedHosts are the hosts completion callbacks may be sent
	// to, written and checked as the http processor's AllowedHosts
	// ([builtin.Options]): the host list, and the address a host resolves
	// to at dial time (no loopback, private or link-local address unless
	// listed). Empty (and CallbackAllowAnyHost false) refuses every URL: the
	// deliveries fail.
	CallbackAllowedHosts []string
	// CallbackAllowAnyHost allows every host but link-local addresses, as
	// the http processor's AllowAnyHost (`bulkaction dev`).
	CallbackAllowAnyHost bool
	// CallbackRetryFor is how long a callback delivery is retried after its
	// group ended (or after a retry by hand) before it is failed; 0 means
	// [DefaultCallbackRetryFor] (24 h).
	CallbackRetryFor time.Duration
	// CallbackFirstRetry is the delay after the first failed attempt, which
	// doubles after each further one up to [CallbackMaxRetryDelay]; 0 means
	// [DefaultCallbackFirstRetry] (5 s).
	CallbackFirstRetry time.Duration
	// CallbackTimeout bounds one attempt; 0 means [DefaultCallbackTimeout]
	// (10 s).
	CallbackTimeout time.Duration
}

func (c *Config) setDefaults() {
	setting.Default(&c.BatchSize, DefaultBatchSize)
	setting.Default(&c.Durable, DefaultDurable)
	setting.Default(&c.StuckAfter, DefaultStuckAfter)
	setting.Default(&c.StuckCheckEvery, min(DefaultStuckCheckEvery, max(c.StuckAfter/5, time.Millisecond)))
	setting.Default(&c.AckWait, DefaultAckWait)
	setting.Default(&c.GroupIdleTTL, redisq.DefaultGroupIdleTTL)
	setting.Default(&c.CallbackRetryFor, DefaultCallbackRetryFor)
	setting.Default(&c.CallbackFirstRetry, DefaultCallbackFirstRetry)
	setting.Default(&c.CallbackTimeout, DefaultCallbackTimeout)
}

func (c *Config) validate() error {
	return setting.Check("aggregator",
		setting.AtLeast("BatchSize", c.BatchSize, 1),
		setting.ConsumerName("Durable", c.Durable),
		setting.NotNegative("StuckAfter", c.StuckAfter),
		setting.NotNegative("StuckCheckEvery", c.StuckCheckEvery),
		setting.NotNegative("GroupIdleTTL", c.GroupIdleTTL),
		setting.AtLeast("AckWait", c.AckWait, 100*time.Millisecond),
		setting.NotNegative("CallbackRetryFor", c.CallbackRetryFor),
		setting.NotNegative("CallbackFirstRetry", c.CallbackFirstRetry),
		setting.NotNegative("CallbackTimeout", c.CallbackTimeout),
	)
}

// Aggregator records job results into their groups. Create it with [New]
// and start it with [Aggregator.Run]; an Aggregator runs once.
type Aggregator struct {
	lifecycle.Started
	cfg     Config
	settler *consume.Settler
	d       deps.Deps
	log     *slog.Logger
	tracer  trace.Tracer
	// callbacks delivers completion callbacks (callbacks.go).
	callbacks *callbacks

	unknownLog telemetry.WarnLimiter
	fencedLog  telemetry.WarnLimiter // results fenced off, one line per batch
	warnLimit  telemetry.WarnLimiter // dead letters and hand-backs

	mu         sync.Mutex
	progressed map[contracts.GroupRef]struct{} // groups with recorded results, for the watch list
	progress   progress                        // when each group's counts were last published
	// publishMu orders the events of a batch and those of publishProgress:
	// a group's last event carries its latest counts.
	publishMu sync.Mutex

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
	log := d.Log.With(telemetry.LogComponent, "aggregator")
	a := &Aggregator{
		cfg:        cfg,
		d:          d,
		log:        log,
		settler:    consume.NewSettler(d, log, nakDelay),
		tracer:     d.TracerProvider.Tracer(TracerName),
		unknownLog: telemetry.WarnLimiter{Interval: unknownLogEvery},
		fencedLog:  telemetry.WarnLimiter{Interval: unknownLogEvery},
		warnLimit:  telemetry.WarnLimiter{Interval: time.Second},
		progressed: map[contracts.GroupRef]struct{}{},
		progress:   progress{every: progressEvery, last: map[contracts.GroupRef]*progressState{}},
	}
	cb, err := newCallbacks(a)
	if err != nil {
		return nil, err
	}
	a.callbacks = cb
	return a, nil
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
	wg.Go(func() { a.publishProgress(ctx) })
	wg.Go(func() { a.callbacks.run(ctx) })
	a.log.Info("aggregator started", "batch", a.cfg.BatchSize)

	loop := consume.Loop{Consumer: cons, Batch: a.cfg.BatchSize, Handle: a.process, Log: a.log, Name: a.cfg.Durable,
		IdleWait: idleWait, ErrorWait: nakDelay}
	a.Signal()
	loop.Run(ctx)
	wg.Wait()
	a.log.Info("aggregator stopped")
	return nil
}

// item is one valid result of a batch; a RESULT message carries 1..N.
type item struct {
	*consume.Delivery
	res *contracts.JobResult
}

// process records one batch and settles it (docs/ARCHITECTURE.md §6.4). A
// message is acknowledged once every result it carries is recorded and the
// events of their groups are published; otherwise it is handed back whole
// (a redelivered result records as a duplicate).
func (a *Aggregator) process(ctx context.Context, msgs []jetstream.Msg) {
	base := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(base, settleTimeout)
	defer cancel()
	ds, items, rejected := a.decode(base, msgs)
	a.settler.Settle(sctx, rejected...)
	if len(items) == 0 {
		return
	}
	results := make([]contracts.JobResult, len(items))
	for i, it := range items {
		results[i] = *it.res
	}

	rctx, rcancel := context.WithTimeout(base, settleTimeout)
	recs, err := a.d.Queue.RecordBatch(rctx, results)
	rcancel()
	if err != nil {
		a.warn("recording results failed; batch handed back", "results", len(items), "err", err)
		for _, d := range ds {
			d.Decide(consume.Retry(nakDelay, err))
		}
		a.settler.Settle(sctx, ds...)
		return
	}
	if a.afterRecord != nil && a.afterRecord() {
		for _, d := range ds {
			d.Span.End()
		}
		return
	}

	a.wakeFetchers(recs)
	failed := map[contracts.GroupRef]error{}
	a.publishMu.Lock()
	changes := a.count(items, recs)
	for _, ch := range changes {
		pctx, cancel := context.WithTimeout(base, settleTimeout)
		if err := a.d.Events.Publish(pctx, ch); err != nil {
			failed[ch.Group] = err
			a.log.Warn("group event not published; its results handed back", "tenant", ch.Group.Tenant, "group", ch.Group.ID,
				"state", string(ch.Counts.State), "err", err)
		}
		cancel()
	}
	a.publishMu.Unlock()
	var sampled []contracts.GroupRef
	for _, ch := range changes {
		if failed[ch.Group] == nil && !ch.Counts.State.Terminal() {
			sampled = append(sampled, ch.Group)
		}
	}
	a.sampleProgress(base, sampled...)
	for _, d := range ds {
		d.Decide(consume.Ack()) // a lost ack means a redelivery, which records as duplicates
	}
	for _, it := range items {
		if err := failed[it.res.Ref()]; err != nil {
			it.Decide(consume.Retry(nakDelay, err))
		}
	}
	a.settler.Settle(sctx, ds...)
}

// decode opens the deliveries of a batch: the results of valid messages
// become items (sharing their message's delivery), the others are decided
// as dead letters and returned apart.
func (a *Aggregator) decode(base context.Context, msgs []jetstream.Msg) (ds []*consume.Delivery, items []item, rejected []*consume.Delivery) {
	items = make([]item, 0, len(msgs))
	for _, m := range msgs {
		d := consume.Open(base, a.tracer, SpanRecord, m)
		b, err := contracts.DecodeResultBatch(m.Subject(), m.Data())
		if err != nil {
			d.Decide(consume.DeadLetter(err))
			rejected = append(rejected, d)
			continue
		}
		if d.Span.IsRecording() {
			r := &b.Results[0]
			d.Span.SetAttributes(AttrTenant.String(r.Tenant), AttrGroupID.String(r.GroupID), AttrJobID.String(r.JobID),
				AttrAttempt.Int(r.Attempt), AttrStatus.String(string(r.Status)), AttrResultCount.Int(len(b.Results)))
		}
		ds = append(ds, d)
		for i := range b.Results {
			items = append(items, item{Delivery: d, res: &b.Results[i]})
		}
	}
	return ds, items, rejected
}

// count counts the recorded results of a batch in the metrics and returns
// the events to publish: one per group, with its counts after the batch,
// in the order the groups first appear. A group that progressed without
// changing state gets an event at most once a second (see [progress]).
func (a *Aggregator) count(items []item, recs []*redisq.RecordResult) []events.Change {
	changes := map[contracts.GroupRef]int{} // group → index in out
	var out []events.Change
	event := func(ch events.Change) {
		if i, ok := changes[ch.Group]; ok {
			ch.Ended = ch.Ended || out[i].Ended // the batch's last counts; an end counted once
			out[i] = ch
			return
		}
		changes[ch.Group] = len(out)
		out = append(out, ch)
	}
	now := time.Now()
	m := a.d.Metrics
	var progressed []events.Change
	var fenced []*contracts.JobResult
	for i, rec := range recs {
		it := items[i]
		g := it.res.Ref()
		if it.Span.IsRecording() { // the attributes' list is allocated even when not
			it.Span.SetAttributes(AttrOutcome.String(string(rec.Outcome)), AttrCompleted.Bool(rec.Completed))
		}
		switch rec.Outcome {
		case redisq.Recorded:
			m.RecordedResults.WithLabelValues(string(it.res.Status)).Inc()
			if rec.CreatedAtMs > 0 {
				m.ObserveSubmitLatency(max(now.Sub(time.UnixMilli(rec.CreatedAtMs)), 0))
			}
			switch {
			case rec.Completed:
				event(events.Change{Group: g, Counts: rec.Group, Ended: true})
			case rec.Group.State.Terminal():
				// A job that was running when its group was cancelled
				// settled: the group's last event must carry the new counts.
				event(events.Change{Group: g, Counts: rec.Group})
			default:
				a.noteProgress(g)
				progressed = append(progressed, events.Change{Group: g, Counts: rec.Group, Progress: true})
			}
		case redisq.DuplicateResult:
			m.RecordedResults.WithLabelValues(telemetry.StatusDuplicate).Inc()
			if rec.Group.State.Terminal() {
				event(events.Change{Group: g, Counts: rec.Group})
			} else {
				// A redelivery after a crash between recording and
				// publishing: the counts may not have reached EVENTS yet.
				progressed = append(progressed, events.Change{Group: g, Counts: rec.Group, Progress: true})
			}
		case redisq.FencedResult:
			// Not counted (docs/ARCHITECTURE.md §6.4): acknowledged and
			// dropped like the others, reported once per batch below.
			m.ResultsFenced.Inc()
			fenced = append(fenced, it.res)
		default: // redisq.UnknownJob
			m.RecordedResults.WithLabelValues(telemetry.StatusDropped).Inc()
			a.logUnknown(it.res, rec.Outcome)
		}
	}
	a.logFenced(fenced)
	for _, ch := range progressed {
		if i, ok := changes[ch.Group]; ok {
			if out[i].Progress {
				out[i] = ch // the group's latest counts of the batch
			}
			continue
		}
		if a.progress.due(ch.Group, now) {
			event(ch)
		}
	}
	for g := range changes {
		a.progress.published(g, now)
	}
	return out
}

// noteProgress remembers a group with a recorded result, to be put on the
// stuck watch list by the next stuck check.
func (a *Aggregator) noteProgress(g contracts.GroupRef) {
	a.mu.Lock()
	a.progressed[g] = struct{}{}
	a.mu.Unlock()
}

// logUnknown logs a result of a job Redis does not know: at warn level at
// most once per unknownLogEvery, at debug level otherwise.
func (a *Aggregator) logUnknown(r *contracts.JobResult, outcome redisq.RecordOutcome) {
	a.unknownLog.Warn(a.log, "result of an unknown job dropped",
		"tenant", r.Tenant, "group", r.GroupID, "job", r.JobID, "attempt", r.Attempt, "outcome", string(outcome))
}

// logFenced reports the fenced results of one batch in one line: at warn
// level at most once per unknownLogEvery, at debug level otherwise. It
// names the first of them (group, job, attempt, status), never a payload
// or an error text.
func (a *Aggregator) logFenced(rs []*contracts.JobResult) {
	if len(rs) == 0 {
		return
	}
	r := rs[0]
	a.fencedLog.Warn(a.log, "results fenced off: their jobs are not in flight with their attempts",
		"results", len(rs), "tenant", r.Tenant, "group", r.GroupID, "job", r.JobID, "attempt", r.Attempt,
		"status", string(r.Status))
}

// warn logs at warn level, at most once per second; the lines left out in
// between are logged at debug level and counted in the next warn line.
func (a *Aggregator) warn(msg string, args ...any) {
	a.warnLimit.Warn(a.log, msg, args...)
}

// wakeFetchers tells idle fetchers that jobs finished: a group at its
// in-flight limit has a free slot again and may be admitted at once, not
// after a fetcher's idle timeout. The notification is on core NATS; losing
// it only delays admission until the next poll.
func (a *Aggregator) wakeFetchers(recs []*redisq.RecordResult) {
	for _, rec := range recs {
		if rec.Outcome == redisq.Recorded && !rec.Group.State.Terminal() {
			if a.d.NC != nil {
				if err := a.d.NC.Publish(a.d.Names.Notify("work"), nil); err != nil {
					a.log.Debug("notify", "err", err)
				}
			}
			return
		}
	}
}
