package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/deadletter"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// kind is the kind of a [Decision].
type kind int

const (
	kindNone       kind = iota // not decided: settled as a retry
	kindAck                    // handled: remove the message
	kindRetry                  // not handled now: deliver it again after a delay
	kindTerm                   // never deliver it again (without a dead letter)
	kindDeadLetter             // rejected: dead-letter it, then never deliver it again
)

// Decision is what becomes of a consumed message: the one vocabulary of
// outcomes of every consumer. The zero Decision is "not decided", which
// [Settler.Settle] treats as a retry after the settler's delay, so a
// message is never dropped by omission.
type Decision struct {
	kind  kind
	delay time.Duration
	err   error
}

// Ack is the decision for a message that was handled (or is a harmless
// no-op): JetStream removes it.
func Ack() Decision { return Decision{kind: kindAck} }

// Retry is the decision for a message that could not be handled now
// (Redis or NATS unavailable): it is delivered again after delay (0 = at
// once). err is the reason, recorded on the span.
func Retry(delay time.Duration, err error) Decision {
	return Decision{kind: kindRetry, delay: delay, err: err}
}

// Term is the decision for a message that must not be delivered again and
// needs no dead letter. err, when set, is recorded on the span.
func Term(err error) Decision { return Decision{kind: kindTerm, err: err} }

// DeadLetter is the decision for a message that is rejected: it is sent to
// the dead-letter stream with err's reason ([contracts.Reason]) and then
// terminated. If the dead letter cannot be stored, the message is retried
// instead, so it is never lost.
func DeadLetter(err error) Decision { return Decision{kind: kindDeadLetter, err: err} }

// Err is the decision's reason (nil for Ack).
func (d Decision) Err() error { return d.err }

// IsDeadLetter reports whether d is a [DeadLetter] decision.
func (d Decision) IsDeadLetter() bool { return d.kind == kindDeadLetter }

// IsAck reports whether d is an [Ack] decision.
func (d Decision) IsAck() bool { return d.kind == kindAck }

// String names the decision: ack, retry, term, dead-letter or none.
func (d Decision) String() string {
	switch d.kind {
	case kindAck:
		return "ack"
	case kindRetry:
		return "retry"
	case kindTerm:
		return "term"
	case kindDeadLetter:
		return "dead-letter"
	}
	return "none"
}

// Delivery is one consumed message being handled, with its consumer span.
type Delivery struct {
	Msg jetstream.Msg
	// Ctx carries Span; child spans of the handling start from it.
	Ctx  context.Context
	Span trace.Span

	decision Decision
}

// Open starts the consumer span of msg (a child of the trace context its
// headers carry, named span, with attrs) and returns its Delivery. It is
// the one place consumer spans are opened.
func Open(ctx context.Context, tracer trace.Tracer, span string, msg jetstream.Msg, attrs ...attribute.KeyValue) *Delivery {
	sctx, sp := telemetry.StartMessageSpan(telemetry.ExtractHeader(ctx, msg.Headers()), tracer, span,
		trace.SpanKindConsumer, msg.Subject(), attrs...)
	return &Delivery{Msg: msg, Ctx: sctx, Span: sp}
}

// Decide sets what becomes of the delivery when it is settled; a later
// call replaces an earlier one.
func (d *Delivery) Decide(dec Decision) { d.decision = dec }

// Decision returns the decision taken so far.
func (d *Delivery) Decision() Decision { return d.decision }

// Settler carries out decisions: it publishes dead letters (all of one
// Settle call in one batch, each awaited), then acknowledges, negatively
// acknowledges or terminates every message, and ends its span. It is the
// one place consumers settle messages.
type Settler struct {
	d        deps.Deps
	log      *slog.Logger
	retry    time.Duration
	warnings telemetry.WarnLimiter
	alerts   telemetry.WarnLimiter
}

// NewSettler returns a Settler publishing dead letters with d (d.JS,
// d.Names and d.Metrics are used) and logging on log. retryDelay is the
// redelivery delay of undecided messages and of rejected messages whose
// dead letter could not be stored.
func NewSettler(d deps.Deps, log *slog.Logger, retryDelay time.Duration) *Settler {
	return &Settler{d: d, log: log, retry: retryDelay, warnings: telemetry.WarnLimiter{Interval: time.Second},
		alerts: telemetry.WarnLimiter{Interval: 10 * time.Second}}
}

// Settle carries out the decisions of ds. Calls made to the server are
// bounded by ctx.
func (s *Settler) Settle(ctx context.Context, ds ...*Delivery) {
	s.deadLetter(ctx, ds)
	for _, d := range ds {
		dec := d.decision
		var err error
		switch dec.kind {
		case kindAck:
			err = d.Msg.Ack()
		case kindTerm, kindDeadLetter:
			if dec.err != nil {
				d.Span.SetStatus(codes.Error, "rejected: "+contracts.Reason(dec.err))
			}
			err = d.Msg.Term()
		default:
			delay := dec.delay
			if dec.kind == kindNone {
				delay = s.retry
			}
			if dec.err != nil {
				d.Span.RecordError(dec.err)
				d.Span.SetStatus(codes.Error, dec.err.Error())
			}
			if delay > 0 {
				err = d.Msg.NakWithDelay(delay)
			} else {
				err = d.Msg.Nak()
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			// A lost settle means a redelivery, which every consumer
			// handles as a duplicate.
			s.log.Debug("settle message", "subject", d.Msg.Subject(), "decision", dec.String(), "err", err)
		}
		d.Span.End()
	}
}

// PublishDeadLetters publishes the dead letters of the rejected deliveries
// of ds and waits for their PubAcks, as Settle does, but settles no message
// and ends no span: for messages read without a consumer of their own to
// settle them with (the fetcher's replay of SUBMIT). A delivery whose dead
// letter was not stored is decided Retry instead.
func (s *Settler) PublishDeadLetters(ctx context.Context, ds ...*Delivery) { s.deadLetter(ctx, ds) }

// deadLetter publishes the dead letters of the rejected deliveries and
// waits for their PubAcks; a delivery whose dead letter was not stored is
// retried instead.
func (s *Settler) deadLetter(ctx context.Context, ds []*Delivery) {
	var rejected []*Delivery
	var msgs []*nats.Msg
	for _, d := range ds {
		if d.decision.kind != kindDeadLetter {
			continue
		}
		m, _, err := deadletter.Message(s.d.Names, d.Msg, d.decision.err, s.messageLimit())
		if err != nil {
			s.deadLetterFailed(d, err)
			continue
		}
		rejected = append(rejected, d)
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return
	}
	var failed int
	for i, err := range natsutil.PublishAll(ctx, s.d.JS, msgs) {
		d := rejected[i]
		reason := contracts.Reason(d.decision.err)
		if err != nil {
			failed++
			s.deadLetterFailed(d, fmt.Errorf("dead-letter %s: %w", reason, err))
			continue
		}
		s.d.Metrics.DeadLetters.WithLabelValues(reason).Inc()
		s.warnings.Warn(s.log, "message dead-lettered", "subject", d.Msg.Subject(), "reason", reason,
			"err", d.decision.err)
	}
	if failed > 0 {
		s.alerts.Warn(s.log, "dead-lettering failed; the messages will be redelivered with a growing delay",
			"failed", failed, "of", len(msgs))
	}
}

// maxRetryDelay caps the growing delay of a message whose dead letter
// could not be stored.
const maxRetryDelay = 5 * time.Minute

// deadLetterFailed turns a rejected delivery whose dead letter could not be
// built or stored into a retry after a delay that doubles with each
// delivery (up to maxRetryDelay), and counts it for alerting: such a
// message is never lost, and never comes back fast enough to crowd out
// the others.
func (s *Settler) deadLetterFailed(d *Delivery, err error) {
	s.d.Metrics.DeadLetterFailures.Inc()
	delay := s.retry
	if md, mdErr := d.Msg.Metadata(); mdErr == nil {
		for i := uint64(1); i < md.NumDelivered && delay < maxRetryDelay; i++ {
			delay *= 2
		}
	}
	d.decision = Retry(min(delay, maxRetryDelay), err)
}

// messageLimit is the largest dead letter the DLQ stream and the server
// take.
func (s *Settler) messageLimit() int {
	limit := s.d.Limits.MessageLimit()
	if s.d.NC != nil {
		if mp := int(s.d.NC.MaxPayload()); mp > 0 && mp < limit {
			limit = mp
		}
	}
	return limit
}
