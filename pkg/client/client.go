package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/jspub"
)

// TracerName is the name of the tracer the client's spans come from.
const TracerName = "github.com/bulkaction/bulkaction/pkg/client"

// DefaultMaxPending is the default of [Options.MaxPending].
const DefaultMaxPending = 4096

// Span attribute keys set by the client.
const (
	AttrGroupID  = attribute.Key("bulkaction.group_id")
	AttrJobCount = attribute.Key("bulkaction.job_count")
)

// Options configure a [Client]. The zero value uses the default subject
// prefix ("bulkaction"), the default validation limits, a publish window of
// 4096 messages and the global tracer provider.
type Options struct {
	// Names gives the subjects and streams. The zero value means the
	// "bulkaction" prefix.
	Names contracts.Names
	// Limits are the validation limits applied before publishing. The zero
	// value means the contracts defaults.
	Limits contracts.Limits
	// MaxPending is how many messages a Submit call keeps awaiting their
	// JetStream acknowledgement at once. 0 or less means 4096.
	MaxPending int
	// TracerProvider creates the client's tracer. nil means the global
	// provider (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

// Client publishes the messages of groups and follows their events. It is
// safe for concurrent use.
type Client struct {
	js         jetstream.JetStream
	names      contracts.Names
	limits     contracts.Limits
	maxPending int
	tracer     trace.Tracer
}

// New returns a Client publishing through js. It panics if js is nil. The
// client creates no streams: the SUBMIT and EVENTS streams of the
// installation must already exist on the server.
func New(js jetstream.JetStream, opts Options) *Client {
	if js == nil {
		panic("client: New with a nil JetStream")
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Client{
		js:         js,
		names:      opts.Names,
		limits:     opts.Limits,
		maxPending: opts.MaxPending,
		tracer:     tp.Tracer(TracerName),
	}
}

// Job is one job to submit. ID must be unique within its group
// (^[A-Za-z0-9_-]{1,128}$), Type selects the processor
// (^[A-Za-z0-9_-]{1,64}$), Payload is any JSON value (nil means null), the
// zero Priority means normal, and BasePriority shifts the group's fair-queue
// score (smaller is served first; 0 is neutral).
type Job struct {
	ID           string
	Type         string
	Payload      json.RawMessage
	Priority     contracts.Priority
	BasePriority int64
}

// SubmitError reports the jobs of a [Client.Submit] call that JetStream did
// not acknowledge. The other jobs are stored. Repeating the same call is
// safe: stored jobs are recognised as duplicates.
type SubmitError struct {
	// Failed holds the indices, into the jobs of the call, of the jobs not
	// known to be stored, in increasing order.
	Failed []int
	// Err is the error of the first failed job.
	Err error
}

// Error implements error.
func (e *SubmitError) Error() string {
	first := -1
	if len(e.Failed) > 0 {
		first = e.Failed[0]
	}
	return fmt.Sprintf("client: submit: %d job(s) not stored, first jobs[%d]: %v", len(e.Failed), first, e.Err)
}

// Unwrap returns Err.
func (e *SubmitError) Unwrap() error { return e.Err }

// Submit validates every job and then publishes each as a "job" submission
// to the group's submit subject, with Nats-Msg-Id "<groupId>:<jobId>" and the
// trace context in its headers, and waits until JetStream has acknowledged
// all of them.
//
// Validation comes first: if a job is invalid (or repeats the id of an
// earlier job of the same call), nothing is published and the error names
// the job's index and the field; it matches errors.Is(err,
// contracts.ErrInvalid) when a contract limit is broken. If some publishes
// fail, Submit returns a *[SubmitError] listing them. Submit with no jobs
// does nothing.
func (c *Client) Submit(ctx context.Context, groupID string, jobs ...Job) error {
	if err := contracts.ValidateID("groupId", groupID); err != nil {
		return fmt.Errorf("client: submit: %w", err)
	}
	subs := make([]contracts.Submission, len(jobs))
	seen := make(map[string]int, len(jobs))
	for i, j := range jobs {
		subs[i] = contracts.Submission{
			V:            contracts.Version,
			Kind:         contracts.KindJob,
			GroupID:      groupID,
			JobID:        j.ID,
			Type:         j.Type,
			Payload:      j.Payload,
			Priority:     j.Priority,
			BasePriority: j.BasePriority,
		}
		if err := subs[i].Validate(c.limits); err != nil {
			return fmt.Errorf("client: submit: jobs[%d]: %w", i, err)
		}
		if k, dup := seen[j.ID]; dup {
			return fmt.Errorf("client: submit: jobs[%d]: jobId %q repeats jobs[%d]", i, j.ID, k)
		}
		seen[j.ID] = i
	}
	if len(jobs) == 0 {
		return nil
	}

	subject := c.names.Submit(groupID)
	ctx, span := c.startSpan(ctx, "bulkaction.submit", subject, groupID, AttrJobCount.Int(len(jobs)))
	defer span.End()

	msgs := make([]*nats.Msg, len(subs))
	for i := range subs {
		data, err := json.Marshal(&subs[i])
		if err != nil {
			err = fmt.Errorf("client: submit: jobs[%d]: %w", i, err)
			endWithError(span, err)
			return err
		}
		msgs[i] = c.newMsg(ctx, subject, contracts.SubmitMsgID(groupID, subs[i].JobID), data)
	}

	var failed []int
	var first error
	for i, err := range jspub.PublishWindow(ctx, c.js, msgs, c.maxPending) {
		if err != nil {
			if first == nil {
				first = err
			}
			failed = append(failed, i)
		}
	}
	if failed != nil {
		err := &SubmitError{Failed: failed, Err: first}
		endWithError(span, err)
		return err
	}
	return nil
}

// Seal declares that the group has exactly total distinct jobs; the group
// completes once that many jobs have a result. Sealing again with the same
// total within the duplicate window is a no-op.
func (c *Client) Seal(ctx context.Context, groupID string, total int64) error {
	sub := contracts.Submission{V: contracts.Version, Kind: contracts.KindSeal, GroupID: groupID, Total: &total}
	return c.publishControl(ctx, "bulkaction.seal", &sub)
}

// Cancel asks for the group to be cancelled: queued and backed-off jobs are
// dropped and counted as cancelled, jobs already running finish and are
// counted.
func (c *Client) Cancel(ctx context.Context, groupID string) error {
	sub := contracts.Submission{V: contracts.Version, Kind: contracts.KindCancel, GroupID: groupID}
	return c.publishControl(ctx, "bulkaction.cancel", &sub)
}

// publishControl validates and publishes a seal or cancel submission and
// waits for its acknowledgement.
func (c *Client) publishControl(ctx context.Context, spanName string, sub *contracts.Submission) error {
	op := string(sub.Kind)
	if err := sub.Validate(c.limits); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	data, err := json.Marshal(sub)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	subject := c.names.Submit(sub.GroupID)
	ctx, span := c.startSpan(ctx, spanName, subject, sub.GroupID)
	defer span.End()
	if _, err := c.js.PublishMsg(ctx, c.newMsg(ctx, subject, sub.MsgID(), data)); err != nil {
		err = fmt.Errorf("client: %s %s: %w", op, sub.GroupID, err)
		endWithError(span, err)
		return err
	}
	return nil
}

func (c *Client) startSpan(ctx context.Context, name, subject, groupID string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(attrs...)
		span.SetAttributes(
			AttrGroupID.String(groupID),
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
		)
	}
	return ctx, span
}

// newMsg builds a message with its Nats-Msg-Id and the trace context of ctx.
func (c *Client) newMsg(ctx context.Context, subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(m.Header))
	return m
}

func endWithError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
