package handoff

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/setting"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ReadyPerWorkerSlot is how many jobs on READY the default capacity allows
// per worker slot: enough to keep every slot busy between admission
// rounds with packs of [DefaultPackJobs] (a slot holds a pack until its
// last job is settled), few enough that a newly arriving small group waits
// behind little (docs/ARCHITECTURE.md §6.2).
const ReadyPerWorkerSlot = 16

// DefaultReadyCapacity is the READY capacity of a [ReadyConfig] that sets
// neither Capacity nor WorkerSlots: [ReadyPerWorkerSlot] × one worker of
// the default concurrency (10).
const DefaultReadyCapacity = ReadyPerWorkerSlot * 10

// ReadyConfig is READY's room and packing as every publisher to READY (the
// fetchers' admissions, the dispatchers' releases and reclaims) and every
// reader of its room (a group's status) sees them: the one definition of
// the READY settings (READY_QUEUE_MAX_SIZE, READY_PACK_JOBS and the worker
// slots of WORKER_COUNT × WORKER_INSTANCES). The zero value is valid: every
// zero field means its documented default ([ReadyConfig.WithDefaults]).
type ReadyConfig struct {
	// Capacity is READY's room of each job type: jobs of a type are
	// published only while READY holds fewer jobs of that type (waiting
	// plus unacknowledged). 0 means [ReadyPerWorkerSlot] × WorkerSlots, or
	// [DefaultReadyCapacity] (160) when WorkerSlots is 0 too.
	Capacity int
	// PackJobs is the most jobs of one type packed into one READY message
	// ([Publish]); 0 means [DefaultPackJobs] (16; 1: one job per message).
	PackJobs int
	// WorkerSlots is the worker slots of every worker instance: the jobs
	// of one type are spread over at least that many READY messages before
	// packs grow ([Packing]). 0 means Capacity / [ReadyPerWorkerSlot], at
	// least 1.
	WorkerSlots int
}

// WithDefaults returns c with every zero field set to its default.
func (c ReadyConfig) WithDefaults() ReadyConfig {
	if c.Capacity == 0 {
		c.Capacity = DefaultReadyCapacity
		if c.WorkerSlots > 0 {
			c.Capacity = ReadyPerWorkerSlot * c.WorkerSlots
		}
	}
	setting.Default(&c.PackJobs, DefaultPackJobs)
	setting.Default(&c.WorkerSlots, max(c.Capacity/ReadyPerWorkerSlot, 1))
	return c
}

// Rules are the checks of c's fields, named as the field Ready of a
// service's Config ([setting.Check]): none may be negative.
func (c ReadyConfig) Rules() []setting.Rule {
	return []setting.Rule{
		setting.NotNegative("Ready.Capacity", c.Capacity),
		setting.NotNegative("Ready.PackJobs", c.PackJobs),
		setting.NotNegative("Ready.WorkerSlots", c.WorkerSlots),
	}
}

// Packing is how the publishers pack the jobs of a round into READY
// messages under c ([Publish]).
func (c ReadyConfig) Packing() Packing {
	return Packing{Jobs: c.PackJobs, Spread: c.WorkerSlots}
}

// Room measures READY's free room per job type: the backpressure of
// fetchers and dispatchers (docs/ARCHITECTURE.md §5). Each job type has its
// own room of Capacity jobs (waiting plus unacknowledged), so a type
// whose workers are slow or gone fills only its own room, never that of
// other types. Create it with [NewRoom]; it is safe for one goroutine.
//
// READY counts messages, and a message may carry several jobs
// ([Publish]): a pack's subject names its job count
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

// Part is rs with every room, Capacity included, cut to share of it
// (0 < share <= 1), rounded up: the part one of several admitters takes
// when each measures READY whole, so that together they overfill a room
// by at most one job each.
func (rs Rooms) Part(share float64) Rooms {
	part := func(n int) int { return int(math.Ceil(float64(n)*share - 1e-9)) }
	out := rs
	out.ByType = make(map[string]int, len(rs.ByType))
	for t, n := range rs.ByType {
		out.ByType[t] = part(n)
	}
	out.Capacity = part(rs.Capacity)
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
