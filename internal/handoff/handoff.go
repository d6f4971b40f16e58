package handoff

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
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

// Publish hands jobs to READY: for each job it starts a span named span
// (a child of the job's stored traceparent, with the group id, job id, type,
// attempt and any extra attrs), publishes a [contracts.ReadyBatch] of that one job to
// d.Names.Ready(job.Type) with Nats-Msg-Id [contracts.ReadyMsgID] and the
// span's trace context in the headers, waits for every PubAck
// ([natsutil.PublishAll]) and then confirms the published jobs with one
// [redisq.Queue.Confirm] call.
//
// It returns the jobs it confirmed, in the order of jobs. A job that was
// not published is left leased, to be re-published once its lease expires;
// err then reports how many failed and the first failure. If the Confirm
// call fails, ok is nil and err says so: the jobs are on READY and their
// leases expire into a re-publish with the same message id. d.JS, d.Queue
// are required; a nil d.TracerProvider means the global provider.
func Publish(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, span string, attrs ...attribute.KeyValue) (ok []redisq.LeasedJob, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	tp := d.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(TracerName)

	msgs := make([]*nats.Msg, 0, len(jobs))
	idx := make([]int, 0, len(jobs)) // jobs index of each message
	spans := make([]trace.Span, len(jobs))
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
	for i, j := range jobs {
		subject := d.Names.Ready(j.Type)
		sctx, sp := telemetry.StartMessageSpan(parentContext(ctx, j.Trace), tracer, span, trace.SpanKindProducer, subject)
		if sp.IsRecording() {
			sp.SetAttributes(AttrTenant.String(j.Group.Tenant), AttrGroupID.String(j.Group.ID), AttrJobID.String(j.ID), AttrJobType.String(j.Type),
				AttrAttempt.Int(j.Attempt))
			sp.SetAttributes(attrs...)
		}
		spans[i] = sp
		rb := contracts.ReadyBatch{V: contracts.Version, Jobs: []contracts.ReadyJob{{
			Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt}}}
		if len(j.Payload) > 0 {
			rb.Jobs[0].Payload = json.RawMessage(j.Payload)
		}
		data, err := json.Marshal(&rb)
		if err != nil {
			fail(i, fmt.Errorf("encode ready job: %w", err))
			continue
		}
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, rb.MsgID())
		telemetry.InjectHeader(sctx, m.Header)
		msgs = append(msgs, m)
		idx = append(idx, i)
	}

	published := make([]bool, len(jobs))
	for k, e := range natsutil.PublishAll(ctx, d.JS, msgs) {
		if e != nil {
			fail(idx[k], e)
			continue
		}
		published[idx[k]] = true
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

// parentContext returns ctx carrying the remote span context of a stored
// W3C traceparent; ctx itself when tp is empty or invalid.
func parentContext(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Traceparent returns the W3C traceparent of the span context in ctx, or ""
// when ctx carries no valid span context. It is the form a job's trace is
// stored in ([redisq.Job.Trace]).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

func endAll(spans []trace.Span) {
	for _, s := range spans {
		if s != nil {
			s.End()
		}
	}
}

// ReadyPerWorkerSlot is how many READY messages the default capacity
// allows per worker slot: enough to keep every slot busy between admission
// rounds, few enough that a newly arriving small group waits behind little.
const ReadyPerWorkerSlot = 4

// DefaultReadyCapacity is the READY capacity of fetchers and dispatchers
// whose configuration leaves it zero: [ReadyPerWorkerSlot] × one worker of
// the default concurrency (10). The settings compute theirs from
// WORKER_COUNT and WORKER_INSTANCES the same way.
const DefaultReadyCapacity = ReadyPerWorkerSlot * 10

// Room measures READY's free room per job type: the backpressure of
// fetchers and dispatchers (docs/ARCHITECTURE.md §5). Each job type has its
// own room of Capacity messages (waiting plus unacknowledged), so a type
// whose workers are slow or gone fills only its own room, never that of
// other types. Create it with [NewRoom]; it is safe for one goroutine.
type Room struct {
	d        deps.Deps
	stream   jetstream.Stream // READY, looked up once
	capacity int
	prefix   string // subject prefix of READY, "<prefix>.ready."
	live     []string
	liveAt   time.Time
}

// liveFor is how long a Room reuses the job types workers announced before
// it reads them again.
const liveFor = time.Second

// NewRoom returns the room of READY with capacity messages per job type.
func NewRoom(d deps.Deps, capacity int) *Room {
	return &Room{d: d, capacity: capacity, prefix: d.Names.Ready("")}
}

// Rooms is READY's room at one moment.
type Rooms struct {
	// ByType is the free room of each job type that has messages on READY
	// or a live worker; a type not in it has the whole capacity free.
	ByType map[string]int
	// Live are the job types some worker announced and still serves.
	Live []string
	// Capacity is the room of a type with no message on READY.
	Capacity int
}

// Measure reads READY's message count per job type (one stream info
// request; the stream is looked up once) and the live job types (from
// Redis, at most once a second).
func (r *Room) Measure(ctx context.Context) (Rooms, error) {
	if r.stream == nil {
		st, err := r.d.JS.Stream(ctx, r.d.Names.StreamReady())
		if err != nil {
			return Rooms{}, fmt.Errorf("handoff: READY: %w", err)
		}
		r.stream = st
	}
	info, err := r.stream.Info(ctx, jetstream.WithSubjectFilter(r.d.Names.ReadyAll()))
	if err != nil {
		r.stream = nil // looked up again next time (the stream may have been re-created)
		return Rooms{}, fmt.Errorf("handoff: READY: %w", err)
	}
	if time.Since(r.liveAt) > liveFor {
		if r.live, err = r.d.Queue.LiveTypes(ctx); err != nil {
			return Rooms{}, err
		}
		r.liveAt = time.Now()
	}
	out := Rooms{ByType: make(map[string]int, len(info.State.Subjects)+len(r.live)), Live: r.live, Capacity: r.capacity}
	for _, t := range r.live {
		out.ByType[t] = r.capacity
	}
	for subj, n := range info.State.Subjects {
		if t, ok := strings.CutPrefix(subj, r.prefix); ok {
			out.ByType[t] = max(r.capacity-int(n), 0)
		}
	}
	return out, nil
}

// LiveOnly returns the room of the live job types only: the room a fetcher
// holding unserved types may fill.
func (rs Rooms) LiveOnly() map[string]int {
	out := make(map[string]int, len(rs.Live))
	for _, t := range rs.Live {
		out[t] = rs.ByType[t]
	}
	return out
}

// Sum is the room of the given types together.
func Sum(rooms map[string]int) int {
	n := 0
	for _, r := range rooms {
		n += r
	}
	return n
}

// Least is the room a batch of jobs of any of the given types may take
// without overfilling one: the smallest room among them (the whole
// capacity when types is empty). The dispatcher, which cannot choose the
// types it releases, uses the least room of the live types.
func (rs Rooms) Least(types []string) int {
	least := rs.Capacity
	for _, t := range types {
		if r, ok := rs.ByType[t]; ok && r < least {
			least = r
		}
	}
	return least
}

// Sleep waits for d or until ctx is done; it reports whether ctx is still
// live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
