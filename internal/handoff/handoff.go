package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
// span's trace context in the headers, waits for every PubAck and then
// confirms the published jobs with one [redisq.Queue.Confirm] call, giving
// each its message's READY sequence ([redisq.LeasedJob.ReadySeq]).
//
// A PubAck that reports a duplicate (the message id was used within the
// stream's duplicate window) counts as published only while the message it
// duplicates is still on READY: the normal case, a re-publish of a lease
// that expired before it was confirmed. When that message is gone, it was
// consumed, and the hand-out that published it was lost (Redis lost recent
// writes, docs/ARCHITECTURE.md §6.2): the same attempt would never reach a
// worker again. Such a job is leased again as a new attempt
// ([redisq.Queue.Relet]: only if it is still leased as the attempt
// published; one that moved on is left alone) and published with the new
// attempt's message id, at most [maxRelets] times.
//
// It returns the jobs it confirmed, in the order of jobs, with the attempt
// they were published as. A job that was not published is left leased, to
// be re-published once its lease expires; err then reports how many failed
// and the first failure. If the Confirm call fails, ok is nil and err says
// so: the jobs are on READY and their leases expire into a re-publish with
// the same message id. d.JS, d.Queue are required; a nil d.TracerProvider
// means the global provider.
func Publish(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, span string, attrs ...attribute.KeyValue) (ok []redisq.LeasedJob, err error) {
	if len(jobs) == 0 {
		return nil, nil
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
	for i, j := range jobs {
		subject := d.Names.Ready(j.Type)
		sctx, sp := telemetry.StartMessageSpan(parentContext(ctx, j.Trace), tracer, span, trace.SpanKindProducer, subject)
		if sp.IsRecording() {
			sp.SetAttributes(AttrTenant.String(j.Group.Tenant), AttrGroupID.String(j.Group.ID), AttrJobID.String(j.ID), AttrJobType.String(j.Type),
				AttrAttempt.Int(j.Attempt))
			sp.SetAttributes(attrs...)
		}
		spans[i], ctxs[i] = sp, sctx
		pending[i] = i
	}
	published := make([]bool, len(jobs))
	var stream jetstream.Stream // READY, looked up at the first duplicate
	for round := 0; len(pending) > 0; round++ {
		msgs := make([]*nats.Msg, 0, len(pending))
		idx := make([]int, 0, len(pending)) // jobs index of each message
		for _, i := range pending {
			m, err := readyMsg(ctxs[i], d, jobs[i])
			if err != nil {
				fail(i, err)
				continue
			}
			msgs = append(msgs, m)
			idx = append(idx, i)
		}
		acks, errs := publishAcks(ctx, d.JS, msgs)
		var gone []redisq.LeasedJob // duplicates of messages no longer on READY
		for k, e := range errs {
			i := idx[k]
			if e == nil && acks[k].Duplicate {
				e = stillOnReady(ctx, d, &stream, acks[k].Sequence)
				if errors.Is(e, errConsumed) {
					if round < maxRelets {
						gone = append(gone, jobs[i])
						continue
					}
					e = fmt.Errorf("message id still a duplicate after %d new attempts: %w", maxRelets, e)
				}
			}
			if e != nil {
				fail(i, e)
				continue
			}
			published[i] = true
			jobs[i].ReadySeq = acks[k].Sequence
		}
		pending = pending[:0]
		if len(gone) == 0 {
			break
		}
		relet, err := d.Queue.Relet(ctx, gone)
		if err != nil {
			for _, j := range gone {
				fail(slices.IndexFunc(jobs, func(x redisq.LeasedJob) bool { return x.Group == j.Group && x.ID == j.ID }), err)
			}
			break
		}
		for _, j := range relet {
			i := slices.IndexFunc(jobs, func(x redisq.LeasedJob) bool { return x.Group == j.Group && x.ID == j.ID })
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

// maxRelets bounds how many new attempts one Publish call gives a job whose
// message id turns out to be a duplicate of a consumed message.
const maxRelets = 3

// errConsumed: a publish was a duplicate of a message no longer on READY.
var errConsumed = errors.New("duplicate of a message no longer on READY")

// readyMsg is job j's READY message: a [contracts.ReadyBatch] of that one
// job on d.Names.Ready(j.Type), with its message id and the trace context
// of sctx.
func readyMsg(sctx context.Context, d deps.Deps, j redisq.LeasedJob) (*nats.Msg, error) {
	rb := contracts.ReadyBatch{V: contracts.Version, Jobs: []contracts.ReadyJob{{
		Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt}}}
	if len(j.Payload) > 0 {
		rb.Jobs[0].Payload = json.RawMessage(j.Payload)
	}
	data, err := json.Marshal(&rb)
	if err != nil {
		return nil, fmt.Errorf("encode ready job: %w", err)
	}
	m := nats.NewMsg(d.Names.Ready(j.Type))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, rb.MsgID())
	telemetry.InjectHeader(sctx, m.Header)
	return m, nil
}

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
//
// READY also has a byte limit (STREAM_READY_MAX_BYTES; the stream refuses
// publishes beyond it): once it holds so many bytes that a message of the
// largest size might not fit, every type's room is 0, so admissions and
// releases wait (their jobs stay queued, or leased and re-published later)
// instead of publishing into a refusal. A warning says so, at most once a
// minute per process. A round measured just under the limit may still
// publish more than fits: the jobs refused stay leased and are re-published
// once their lease expires (LEASE_MS) and READY has room.
type Room struct {
	d        deps.Deps
	stream   jetstream.Stream // READY, looked up once
	capacity int
	prefix   string // subject prefix of READY, "<prefix>.ready."
	live     []string
	liveAt   time.Time
}

// fullLog limits the warning that READY is at its byte limit to one a
// minute per process, whatever the number of Rooms (a fetcher's, a
// dispatcher's two).
var fullLog = telemetry.WarnLimiter{Interval: time.Minute}

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
	// Seq is READY's last sequence when it was measured: pass it to the
	// admission ([redisq.WithReadySeq]), which completes the measurement
	// with what other fetchers and dispatchers handed on since, atomically.
	Seq uint64
	// Full: READY is at its byte (or message) limit, so every room,
	// Capacity included, is 0.
	Full bool
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
	// The server reads the stream's state (LastSeq) before the subjects'
	// counts: a message published in between is counted in both, never in
	// neither, so the room is never overstated.
	out := Rooms{ByType: make(map[string]int, len(info.State.Subjects)+len(r.live)), Live: r.live, Capacity: r.capacity,
		Seq: info.State.LastSeq}
	for _, t := range r.live {
		out.ByType[t] = r.capacity
	}
	for subj, n := range info.State.Subjects {
		if t, ok := strings.CutPrefix(subj, r.prefix); ok {
			out.ByType[t] = max(r.capacity-int(n), 0)
		}
	}
	if atLimit(info) {
		out.Full, out.Capacity = true, 0
		for t := range out.ByType {
			out.ByType[t] = 0
		}
		if r.d.Log != nil {
			fullLog.Warn(r.d.Log.With(telemetry.LogComponent, "handoff"),
				"READY is at its byte limit: admissions and releases wait until workers make room",
				"bytes", info.State.Bytes, "limit", info.Config.MaxBytes, "messages", info.State.Msgs)
		}
	}
	return out, nil
}

// atLimit reports whether a stream has no room left for a message of its
// largest size (1 MiB when it sets none), or is at its message limit:
// a publish might be refused as "maximum bytes exceeded".
func atLimit(info *jetstream.StreamInfo) bool {
	c, st := info.Config, info.State
	if c.MaxMsgs > 0 && st.Msgs >= uint64(c.MaxMsgs) {
		return true
	}
	if c.MaxBytes <= 0 {
		return false
	}
	largest := int64(c.MaxMsgSize)
	if largest <= 0 {
		largest = 1 << 20
	}
	largest = min(largest, c.MaxBytes)
	return int64(st.Bytes)+largest > c.MaxBytes
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
