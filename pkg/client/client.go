package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

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

// DefaultBatchSize is the default of [Options.BatchSize].
const DefaultBatchSize = 100

// DefaultTenant is the tenant of a client whose [Options.Tenant] is empty.
const DefaultTenant = "default"

// Span attribute keys set by the client.
const (
	AttrTenant   = attribute.Key("bulkaction.tenant")
	AttrGroupID  = attribute.Key("bulkaction.group_id")
	AttrJobCount = attribute.Key("bulkaction.job_count")
)

// Options configure a [Client]. The zero value uses the default subject
// prefix ("bulkaction"), the tenant "default", the default validation
// limits, messages of up to 100 jobs, a publish window of 4096 messages and
// the global tracer provider.
type Options struct {
	// Names gives the subjects and streams. The zero value means the
	// "bulkaction" prefix.
	Names contracts.Names
	// Tenant is the tenant whose groups the client submits and follows
	// ("" means [DefaultTenant]); [Client.ForTenant] returns a client of
	// another tenant. A tenant's NATS user is usually allowed to publish
	// only to its own subjects.
	Tenant string
	// Limits are the validation limits applied before publishing. The zero
	// value means the contracts defaults.
	Limits contracts.Limits
	// BatchSize is the most jobs one submit message carries, 1 to
	// [contracts.MaxBatch]; 0 or less means 100. A message is also kept
	// within the message limit of Limits.
	BatchSize int
	// MaxPending is how many messages a Submit call keeps awaiting their
	// JetStream acknowledgement at once. 0 or less means 4096.
	MaxPending int
	// TracerProvider creates the client's tracer. nil means the global
	// provider (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

// Client publishes the messages of one tenant's groups and follows their
// events. It is safe for concurrent use.
type Client struct {
	js         jetstream.JetStream
	names      contracts.Names
	tenant     string
	limits     contracts.Limits
	batch      int
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
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	opts.BatchSize = min(opts.BatchSize, contracts.MaxBatch)
	if opts.Tenant == "" {
		opts.Tenant = DefaultTenant
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Client{
		js:         js,
		names:      opts.Names,
		tenant:     opts.Tenant,
		limits:     opts.Limits,
		batch:      opts.BatchSize,
		maxPending: opts.MaxPending,
		tracer:     tp.Tracer(TracerName),
	}
}

// Tenant returns the client's tenant.
func (c *Client) Tenant() string { return c.tenant }

// ForTenant returns a client that shares c's connection and options but
// submits and follows the groups of tenant.
func (c *Client) ForTenant(tenant string) *Client {
	d := *c
	d.tenant = tenant
	return &d
}

// group returns the GroupRef of groupID in c's tenant, validated.
func (c *Client) group(groupID string) (contracts.GroupRef, error) {
	g := contracts.Group(c.tenant, groupID)
	return g, g.Validate()
}

// Job is one job to submit. ID must be unique within its group
// (^[A-Za-z0-9_-]{1,128}$), Type selects the processor
// (^[A-Za-z0-9_-]{1,64}$) and Payload is any JSON value (nil means null).
// Destination optionally names the downstream the job calls
// (^[A-Za-z0-9_.-]{1,128}$: a partner's host, an account of a provider),
// whose accepted rate the adaptive rate learns; "" means its type, or, for
// the built-in http type, its URL's host ([contracts.SubmitJob.Destination]).
type Job struct {
	ID          string
	Type        string
	Payload     json.RawMessage
	Destination string
}

// SubmitError reports the jobs of a [Client.Submit] call that JetStream did
// not acknowledge. The other jobs are stored. Repeating the same call is
// safe: stored jobs are recognised as duplicates.
type SubmitError struct {
	// Failed holds the indices, into the jobs of the call, of the jobs not
	// known to be stored, in increasing order.
	Failed []int
	// Err is the error of the first failed message.
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

// Submit submits jobs of the group with the default group settings; see
// [Client.SubmitGroup].
func (c *Client) Submit(ctx context.Context, groupID string, jobs ...Job) error {
	return c.SubmitGroup(ctx, groupID, contracts.GroupSettings{}, jobs...)
}

// SubmitGroup validates every job and then publishes them as "jobs"
// submissions of up to [Options.BatchSize] jobs each (and within the message
// limit) to the group's submit subject, with a Nats-Msg-Id derived from the
// job ids ([contracts.JobsMsgID]) and the trace context in the headers, and
// waits until JetStream has acknowledged every message.
//
// settings (priority, base priority, in-flight limit) apply when the message
// creates the group; a group that exists keeps its own, and the group's
// event stream reports a submission whose settings differ.
//
// Validation comes first: if a job is invalid (or repeats the id of an
// earlier job of the same call), nothing is published and the error names
// the job's index and the field; it matches errors.Is(err,
// contracts.ErrInvalid) when a contract limit is broken. If some publishes
// fail, SubmitGroup returns a *[SubmitError] listing the jobs of the failed
// messages. Submitting no jobs does nothing.
func (c *Client) SubmitGroup(ctx context.Context, groupID string, settings contracts.GroupSettings, jobs ...Job) error {
	g, err := c.group(groupID)
	if err != nil {
		return fmt.Errorf("client: submit: %w", err)
	}
	var group *contracts.GroupSettings
	if !settings.IsZero() {
		group = &settings
	}
	if len(jobs) > 0 {
		if err := settings.Validate(); err != nil {
			return fmt.Errorf("client: submit: %w", err)
		}
	}
	all := make([]contracts.SubmitJob, len(jobs))
	seen := make(map[string]int, len(jobs))
	for i, j := range jobs {
		all[i] = contracts.SubmitJob{JobID: j.ID, Type: j.Type, Payload: j.Payload, Destination: j.Destination}
		if err := all[i].Validate(c.limits); err != nil {
			return fmt.Errorf("client: submit: %w", contracts.ItemError("jobs", i, err))
		}
		if k, dup := seen[j.ID]; dup {
			return fmt.Errorf("client: submit: jobs[%d]: jobId %q repeats jobs[%d]", i, j.ID, k)
		}
		seen[j.ID] = i
	}
	if len(jobs) == 0 {
		return nil
	}

	subject := c.names.Submit(g)
	ctx, span := c.startSpan(ctx, "bulkaction.submit", subject, g, AttrJobCount.Int(len(jobs)))
	defer span.End()

	var msgs []*nats.Msg
	var starts []int // index of each message's first job
	for start := 0; start < len(all); {
		end, msg, err := c.encodeJobs(ctx, subject, g, group, all, start)
		if err != nil {
			endWithError(span, err)
			return err
		}
		msgs = append(msgs, msg)
		starts = append(starts, start)
		start = end
	}
	starts = append(starts, len(all))

	var failed []int
	var first error
	for i, err := range jspub.PublishWindow(ctx, c.js, msgs, c.maxPending) {
		if err != nil {
			if first == nil {
				first = err
			}
			for k := starts[i]; k < starts[i+1]; k++ {
				failed = append(failed, k)
			}
		}
	}
	if failed != nil {
		err := &SubmitError{Failed: failed, Err: first}
		endWithError(span, err)
		return err
	}
	return nil
}

// encodeJobs builds the message of the jobs from start on, as many as the
// batch size and the message limit allow (at least one), and returns the
// end of the batch. The limit counts the headers too, as the server does.
// Only the server-side fields are sent: the subject names the group.
func (c *Client) encodeJobs(ctx context.Context, subject string, g contracts.GroupRef, group *contracts.GroupSettings,
	all []contracts.SubmitJob, start int) (int, *nats.Msg, error) {
	end := min(start+c.batch, len(all))
	limit := c.limits.MessageLimit()
	for {
		sub := contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs, Jobs: all[start:end], Group: group}
		data, err := json.Marshal(&sub)
		if err != nil {
			return 0, nil, fmt.Errorf("client: submit: jobs[%d]: %w", start, err)
		}
		m := c.newMsg(ctx, subject, contracts.JobsMsgID(g, all[start:end]), data)
		size := len(data) + headerSize(m.Header)
		if size <= limit {
			return end, m, nil
		}
		if end-start == 1 {
			return 0, nil, fmt.Errorf("client: submit: %w", &contracts.ValidationError{
				Reason: contracts.ReasonTooLarge, Field: "jobs[" + strconv.Itoa(start) + "]",
				Problem: fmt.Sprintf("a message of %d bytes", size), Limit: fmt.Sprintf("limit %d", limit)})
		}
		end = start + (end-start)/2
	}
}

// headerSize returns the size of h on the wire (at least what the server
// counts against a stream's maximum message size): "NATS/1.0\r\n", a
// "key: value\r\n" line per value and "\r\n"; 0 for no headers.
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// Seal declares that the group has exactly total distinct jobs; the group
// completes once that many jobs have a result. Sealing again with the same
// total within the duplicate window is a no-op.
func (c *Client) Seal(ctx context.Context, groupID string, total int64) error {
	return c.publishControl(ctx, "bulkaction.seal", groupID, contracts.KindSeal, &total)
}

// Cancel asks for the group to be cancelled: queued and backed-off jobs are
// dropped and counted as cancelled, jobs already running finish and are
// counted. A cancel that arrives before the group's first job is honoured:
// the group is created cancelled and its jobs are refused.
func (c *Client) Cancel(ctx context.Context, groupID string) error {
	return c.publishControl(ctx, "bulkaction.cancel", groupID, contracts.KindCancel, nil)
}

// Pause stops admitting the group's jobs; the group keeps its place in the
// fair queue, and jobs already running finish and are counted. Jobs
// submitted while the group is paused are stored and wait.
func (c *Client) Pause(ctx context.Context, groupID string) error {
	return c.publishControl(ctx, "bulkaction.pause", groupID, contracts.KindPause, nil)
}

// Resume lets a paused group's jobs be admitted again, from the place the
// group had when it was paused.
func (c *Client) Resume(ctx context.Context, groupID string) error {
	return c.publishControl(ctx, "bulkaction.resume", groupID, contracts.KindResume, nil)
}

// Reschedule moves the notBefore of a group that has not started yet,
// earlier or later; a past time lets it start at once. A group that has
// started keeps going (its events carry a notice).
func (c *Client) Reschedule(ctx context.Context, groupID string, notBefore time.Time) error {
	op := string(contracts.KindSchedule)
	g, err := c.group(groupID)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	sub := contracts.Submission{V: contracts.Version, Kind: contracts.KindSchedule, NotBefore: notBefore.Format(time.RFC3339Nano)}
	sub.Tenant, sub.GroupID = g.Tenant, g.ID
	if err := sub.Validate(c.limits); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	sub.Tenant, sub.GroupID = "", "" // the subject names the group
	data, err := json.Marshal(&sub)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	subject := c.names.Submit(g)
	ctx, span := c.startSpan(ctx, "bulkaction.schedule", subject, g)
	defer span.End()
	if _, err := c.js.PublishMsg(ctx, c.newMsg(ctx, subject, "", data)); err != nil {
		err = fmt.Errorf("client: %s %s: %w", op, g, err)
		endWithError(span, err)
		return err
	}
	return nil
}

// publishControl validates and publishes a seal, cancel, pause or resume
// submission and waits for its acknowledgement.
func (c *Client) publishControl(ctx context.Context, spanName, groupID string, kind contracts.Kind, total *int64) error {
	op := string(kind)
	g, err := c.group(groupID)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	sub := contracts.Submission{V: contracts.Version, Kind: kind, Tenant: g.Tenant, GroupID: g.ID, Total: total}
	if err := sub.Validate(c.limits); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	msgID := sub.MsgID()
	sub.Tenant, sub.GroupID = "", "" // the subject names the group
	data, err := json.Marshal(&sub)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	subject := c.names.Submit(g)
	ctx, span := c.startSpan(ctx, spanName, subject, g)
	defer span.End()
	if _, err := c.js.PublishMsg(ctx, c.newMsg(ctx, subject, msgID, data)); err != nil {
		err = fmt.Errorf("client: %s %s: %w", op, g, err)
		endWithError(span, err)
		return err
	}
	return nil
}

func (c *Client) startSpan(ctx context.Context, name, subject string, g contracts.GroupRef, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(attrs...)
		span.SetAttributes(
			AttrTenant.String(g.Tenant),
			AttrGroupID.String(g.ID),
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
		)
	}
	return ctx, span
}

// newMsg builds a message with its Nats-Msg-Id ("" = none) and the trace
// context of ctx.
func (c *Client) newMsg(ctx context.Context, subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(m.Header))
	return m
}

func endWithError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
