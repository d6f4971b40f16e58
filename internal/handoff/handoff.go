package handoff

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// Publish hands jobs to READY one job per message: it is [PublishPacks]
// with packJobs 1.
func Publish(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, span string, attrs ...attribute.KeyValue) ([]redisq.LeasedJob, error) {
	return PublishPacks(ctx, d, jobs, 1, span, attrs...)
}

// PublishPacks hands jobs to READY: for each job it starts a span named span
// (a child of the job's stored traceparent, with the group id, job id, type,
// attempt and any extra attrs), packs the jobs of each type into
// [contracts.ReadyBatch] messages of up to packJobs jobs (0 or less means
// [DefaultPackJobs], 1: one job per message; never more bytes than the
// message limit, see [packs]), publishes each to
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
func PublishPacks(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, packJobs int, span string, attrs ...attribute.KeyValue) (ok []redisq.LeasedJob, err error) {
	return PublishPacked(ctx, d, jobs, Packing{Jobs: packJobs}, span, attrs...)
}

// Packing says how [PublishPacked] packs jobs into READY messages.
type Packing struct {
	// Jobs is the most jobs of one type a message carries (0 or less:
	// [DefaultPackJobs]).
	Jobs int
	// Spread is the fewest messages the jobs of one type are spread over
	// while they are as many: the worker slots of every worker instance.
	// A worker pulls one message per free slot, so a round of few jobs
	// packed into fewer messages than there are slots would leave slots,
	// or whole workers, idle while the jobs of one pack wait for a slot of
	// the worker that pulled it. 0: no spreading.
	Spread int
}

// PublishPacked is [PublishPacks] with packing p.
func PublishPacked(ctx context.Context, d deps.Deps, jobs []redisq.LeasedJob, p Packing, span string, attrs ...attribute.KeyValue) (ok []redisq.LeasedJob, err error) {
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

// DefaultPackJobs is the pack size of a hand-off that sets none: up to 16
// jobs of one type per READY message. A pack shares one publish, one
// PubAck, one stored message, one delivery and one ack among its jobs.
// A worker runs the first job of a message in the slot it was pulled with
// and each further one in a slot of its own as one frees up, and the
// message stays on READY (and in its type's room, see [Room]) until its
// last job is settled; [Packing.Spread] keeps a round of few jobs from
// going to fewer workers than it could. The trade-off was measured with
// the end-to-end benchmark (docs/ARCHITECTURE.md §6.2): 16 against 1 more than
// doubles the throughput of noop jobs, and halves the CPU per job; 32
// adds nothing measurable. 1 gives the lowest latency to one job.
const DefaultPackJobs = 16

// packHeadroom is the room left under the message limit for a pack's
// headers (message id, traceparent, one [HeaderJobTraceparent] value per
// job: about 700 bytes for 8 jobs).
const packHeadroom = 4 << 10

// HeaderJobTraceparent is the header of a READY message of several jobs
// that lists each job's W3C traceparent, one value per job in the order of
// the body's jobs (the traceparent header is the first job's). A consumer
// that finds as many values as jobs may parent each job's span on its own.
const HeaderJobTraceparent = "Bulkaction-Job-Traceparent"

// AttrPackSize is the number of jobs of the READY message a job was
// published in, set on hand-off spans of packs of more than one job.
const AttrPackSize = attribute.Key("bulkaction.ready.pack_size")

// packLimit is the largest body a READY pack may have: the message limit
// (the streams' and the server's, the lower) less the headers' room.
func packLimit(d deps.Deps) int {
	limit := d.Limits.MessageLimit()
	if d.NC != nil {
		if mp := int(d.NC.MaxPayload()); mp > 0 && mp < limit {
			limit = mp
		}
	}
	return max(limit-packHeadroom, 1)
}

// readyItem is the JSON of job j as an item of a [contracts.ReadyBatch].
func readyItem(j redisq.LeasedJob) ([]byte, error) {
	rj := contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt}
	if len(j.Payload) > 0 {
		rj.Payload = json.RawMessage(j.Payload)
	}
	b, err := json.Marshal(&rj)
	if err != nil {
		return nil, fmt.Errorf("encode ready job: %w", err)
	}
	return b, nil
}

// Framing of a ready batch around its items: {"v":2,"jobs":[…]}.
var (
	batchHead = []byte(`{"v":` + strconv.Itoa(contracts.Version) + `,"jobs":[`)
	batchTail = []byte(`]}`)
)

// tooLarge reports whether a publish was refused because the message
// exceeds the stream's or the server's size limit.
func tooLarge(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}

// packs splits the jobs at idx (indexes into jobs, each encoded in items)
// into READY messages: the jobs of each type, in a canonical order (by
// tenant, group and id, so that the same jobs handed out again, as a
// reclaim does after a lost confirm, form the same packs and the
// re-publish is deduplicated), cut into as few packs as pk.Jobs jobs a
// pack allows but no fewer than pk.Spread (nor than one job a pack), of
// even sizes (9 jobs make packs of 5 and 4, not 8 and 1), and
// cut again wherever a pack's body would exceed limit bytes. A job marked
// alone gets a message of its own. Types come in the order of their first
// job in idx.
func packs(jobs []redisq.LeasedJob, items [][]byte, idx []int, alone []bool, pk Packing, limit int) [][]int {
	per := pk.Jobs
	var types []string
	byType := map[string][]int{}
	var out [][]int
	for _, i := range idx {
		if alone[i] || per <= 1 {
			out = append(out, []int{i})
			continue
		}
		t := jobs[i].Type
		if _, ok := byType[t]; !ok {
			types = append(types, t)
		}
		byType[t] = append(byType[t], i)
	}
	for _, t := range types {
		js := byType[t]
		slices.SortFunc(js, func(a, b int) int {
			x, y := jobs[a], jobs[b]
			return cmp.Or(strings.Compare(x.Group.Tenant, y.Group.Tenant), strings.Compare(x.Group.ID, y.Group.ID),
				strings.Compare(x.ID, y.ID))
		})
		n := (len(js) + per - 1) / per      // packs by count
		n = max(n, min(len(js), pk.Spread)) // spread over the worker slots
		for k := 0; k < n; k++ {
			part := js[k*len(js)/n : (k+1)*len(js)/n]
			// cut by bytes
			start, size := 0, len(batchHead)+len(batchTail)
			for e, i := range part {
				add := len(items[i])
				if e > start {
					add++ // the comma
				}
				if e > start && size+add > limit {
					out = append(out, part[start:e])
					start, size, add = e, len(batchHead)+len(batchTail), len(items[i])
				}
				size += add
			}
			out = append(out, part[start:])
		}
	}
	return out
}

// readyMsg is the READY message of the pack p (indexes into jobs, all of
// one type, encoded in items): a [contracts.ReadyBatch] of those jobs on
// d.Names.ReadyPack(type, jobs) with the batch's message id, the first job's trace
// context (ctxs) in the headers and, for more than one job, every job's in
// [HeaderJobTraceparent].
func readyMsg(d deps.Deps, jobs []redisq.LeasedJob, items [][]byte, ctxs []context.Context, p []int) *nats.Msg {
	size := len(batchHead) + len(batchTail) + len(p)
	for _, i := range p {
		size += len(items[i])
	}
	data := make([]byte, 0, size)
	data = append(data, batchHead...)
	// the ids and attempts name the message (the payloads do not)
	ids := contracts.ReadyBatch{Jobs: make([]contracts.ReadyJob, len(p))}
	for k, i := range p {
		if k > 0 {
			data = append(data, ',')
		}
		data = append(data, items[i]...)
		j := jobs[i]
		ids.Jobs[k] = contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt}
	}
	data = append(data, batchTail...)
	m := nats.NewMsg(d.Names.ReadyPack(jobs[p[0]].Type, len(p)))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, ids.MsgID())
	telemetry.InjectHeader(ctxs[p[0]], m.Header)
	if len(p) > 1 {
		for _, i := range p {
			m.Header.Add(HeaderJobTraceparent, Traceparent(ctxs[i]))
		}
	}
	return m
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

// ReadyPerWorkerSlot is how many jobs on READY the default capacity allows
// per worker slot: enough to keep every slot busy between admission
// rounds with packs of [DefaultPackJobs] (a slot holds a pack until its
// last job is settled), few enough that a newly arriving small group waits
// behind little (docs/ARCHITECTURE.md §6.2).
const ReadyPerWorkerSlot = 16

// DefaultReadyCapacity is the READY capacity of fetchers and dispatchers
// whose configuration leaves it zero: [ReadyPerWorkerSlot] × one worker of
// the default concurrency (10). The settings compute theirs from
// WORKER_COUNT and WORKER_INSTANCES the same way.
const DefaultReadyCapacity = ReadyPerWorkerSlot * 10

// Room measures READY's free room per job type: the backpressure of
// fetchers and dispatchers (docs/ARCHITECTURE.md §5). Each job type has its
// own room of Capacity jobs (waiting plus unacknowledged), so a type
// whose workers are slow or gone fills only its own room, never that of
// other types. Create it with [NewRoom]; it is safe for one goroutine.
//
// READY counts messages, and a message may carry several jobs
// ([PublishPacks]): a pack's subject names its job count
// ([contracts.Names.ReadyPack]), so the stream's message count per subject
// gives the jobs on READY of every publisher, exactly, from the same one
// stream info request. A pack counts as all its jobs until its message is
// acknowledged, after its last job is settled.
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
	live     []string
	liveAt   time.Time
	// last is the last measurement, taken at lastAt (zero: none to reuse).
	last   Rooms
	lastAt time.Time
}

// fullLog limits the warning that READY is at its byte limit to one a
// minute per process, whatever the number of Rooms (a fetcher's, a
// dispatcher's two).
var fullLog = telemetry.WarnLimiter{Interval: time.Minute}

// liveFor is how long a Room reuses the job types workers announced before
// it reads them again.
const liveFor = time.Second

// NewRoom returns the room of READY with capacity jobs per job type.
func NewRoom(d deps.Deps, capacity int) *Room {
	return &Room{d: d, capacity: capacity}
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
	// roomy: READY used at most half of its byte and message limits.
	roomy bool
}

// Measure reads READY's job count per job type (one stream info request
// for the message count of each subject; the stream is looked up once) and
// the live job types (from Redis, at most once a second).
func (r *Room) Measure(ctx context.Context) (Rooms, error) {
	r.lastAt = time.Time{}
	at := time.Now()
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
		Seq: info.State.LastSeq, roomy: belowHalf(info)}
	for _, t := range r.live {
		out.ByType[t] = r.capacity
	}
	for t, n := range jobsByType(r.d.Names, info.State.Subjects) {
		out.ByType[t] = max(r.capacity-n, 0)
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
	r.last, r.lastAt = out, at
	return out, nil
}

// Recent returns the last measurement again while it is younger than
// maxAge and READY then used at most half of its byte and message limits;
// ok is false otherwise (measure). Admitting against an older measurement
// never overfills a type's room, it only holds more jobs: the admission
// takes from its rooms everything any admitter handed to READY since its
// sequence (ours of earlier rounds included), and a measurement older than
// another admitter's gives no room at all; what workers took since is not
// counted back. The caller measures again when the reused rooms held jobs.
// The maps of the Rooms returned are shared: callers only read them.
func (r *Room) Recent(maxAge time.Duration) (Rooms, bool) {
	if r.lastAt.IsZero() || time.Since(r.lastAt) >= maxAge || !r.last.roomy {
		return Rooms{}, false
	}
	return r.last, true
}

// belowHalf reports whether a stream uses at most half of its byte and
// message limits.
func belowHalf(info *jetstream.StreamInfo) bool {
	c, st := info.Config, info.State
	if c.MaxMsgs > 0 && st.Msgs > uint64(c.MaxMsgs)/2 {
		return false
	}
	return c.MaxBytes <= 0 || int64(st.Bytes) <= c.MaxBytes/2
}

// jobsByType turns READY's message count per subject into its job count
// per type: a pack's subject names how many jobs it carries
// ([contracts.Names.ReadyPack]).
func jobsByType(names contracts.Names, subjects map[string]uint64) map[string]int {
	out := make(map[string]int, len(subjects))
	for subj, n := range subjects {
		if t, jobs, ok := names.ReadyFromSubject(subj); ok {
			out[t] += int(n) * jobs
		}
	}
	return out
}

// ReadyJobs returns the number of jobs on READY, waiting or being worked
// on (one stream info request): its messages counted by the jobs each
// carries.
func ReadyJobs(ctx context.Context, js jetstream.JetStream, names contracts.Names) (int, error) {
	st, err := js.Stream(ctx, names.StreamReady())
	if err != nil {
		return 0, fmt.Errorf("handoff: READY: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(names.ReadyAll()))
	if err != nil {
		return 0, fmt.Errorf("handoff: READY: %w", err)
	}
	return Sum(jobsByType(names, info.State.Subjects)), nil
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
