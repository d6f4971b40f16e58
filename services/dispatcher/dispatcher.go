package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/setting"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Defaults of the [Config] fields.
const (
	// DefaultBatchSize is the default of [Config.BatchSize].
	DefaultBatchSize = 500
	// DefaultInterval is the default of [Config.Interval].
	DefaultInterval = 50 * time.Millisecond
	// DefaultReclaimInterval is the default of [Config.ReclaimInterval].
	DefaultReclaimInterval = time.Second
	// DefaultCorrectInterval is the default of [Config.CorrectInterval].
	DefaultCorrectInterval = 30 * time.Second
	// DefaultSnapshotInterval is the default of [Config.SnapshotInterval].
	DefaultSnapshotInterval = 10 * time.Second
)

const (
	// minWait is the shortest sleep of the release loop when it did not
	// release a full batch (rate-gated, or a due time in the past by the
	// local clock), so that it never spins.
	minWait = time.Millisecond
	// maxGatedWait caps the sleep while due jobs remain unreleased (the
	// rate gate held them back); it starts at minWait and doubles.
	maxGatedWait = 10 * time.Millisecond
	// minFullWait is the first sleep while READY is full; it doubles up to
	// Interval.
	minFullWait = 2 * time.Millisecond
	// cycleTimeout bounds one release or reclaim cycle; a cycle that has
	// started finishes even when Run's context is cancelled.
	cycleTimeout = 30 * time.Second
)

// Config configures a [Dispatcher]. The zero value is valid: every zero
// field means its documented default.
type Config struct {
	// Ready is READY's room and packing: jobs are released (and reclaimed
	// jobs re-published) only while READY holds fewer than Ready.Capacity
	// jobs of their type, packed as Ready says; zero fields mean the
	// defaults of [handoff.ReadyConfig] (160 jobs, packs of 16).
	Ready handoff.ReadyConfig
	// BatchSize is the most jobs one release or reclaim call moves;
	// default 500.
	BatchSize int
	// Interval is the longest sleep between releases; default 50ms. The
	// loop wakes earlier when the next backed-off job is due sooner.
	Interval time.Duration
	// ReclaimInterval is how often expired admission leases are looked
	// for; default 1s.
	ReclaimInterval time.Duration
	// CorrectInterval is how often the groups' non-ready counters are
	// re-derived from the non-ready queue; default 30s.
	CorrectInterval time.Duration
	// SnapshotInterval is how often the congestion summary is appended to
	// the bounded history; default 10s.
	SnapshotInterval time.Duration
}

func (c *Config) setDefaults() {
	c.Ready = c.Ready.WithDefaults()
	setting.Default(&c.BatchSize, DefaultBatchSize)
	setting.Default(&c.Interval, DefaultInterval)
	setting.Default(&c.ReclaimInterval, DefaultReclaimInterval)
	setting.Default(&c.CorrectInterval, DefaultCorrectInterval)
	setting.Default(&c.SnapshotInterval, DefaultSnapshotInterval)
}

func (c *Config) validate() error {
	return setting.Check("dispatcher", append(c.Ready.Rules(),
		setting.NotNegative("BatchSize", c.BatchSize),
		setting.NotNegative("Interval", c.Interval),
		setting.NotNegative("ReclaimInterval", c.ReclaimInterval),
		setting.NotNegative("CorrectInterval", c.CorrectInterval),
		setting.NotNegative("SnapshotInterval", c.SnapshotInterval),
	)...)
}

// Dispatcher releases backed-off jobs and recovers expired leases. Create
// it with [New] (the zero value is not usable); any number may run against
// the same Redis and NATS.
type Dispatcher struct {
	lifecycle.Started
	// one READY room per loop (a Room serves one goroutine)
	releaseRoom, reclaimRoom *handoff.Room
	cfg                      Config
	d                        deps.Deps
	log                      *slog.Logger
}

// New returns a Dispatcher. d.JS and d.Queue are required; the other
// dependencies take the defaults of [deps.Deps.Fill].
func New(cfg Config, d deps.Deps) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if d.JS == nil || d.Queue == nil {
		return nil, errors.New("dispatcher: deps JS and Queue are required")
	}
	if err := d.Names.Validate(); err != nil {
		return nil, fmt.Errorf("dispatcher: names: %w", err)
	}
	d = d.Fill()
	return &Dispatcher{cfg: cfg, d: d, log: d.Log.With(telemetry.LogComponent, "dispatcher"),
		releaseRoom: handoff.NewRoom(d, cfg.Ready.Capacity), reclaimRoom: handoff.NewRoom(d, cfg.Ready.Capacity)}, nil
}

// Run releases, reclaims, corrects and snapshots until ctx is cancelled,
// finishes the cycles under way, and returns nil.
func (p *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	loops := []func(context.Context){
		p.releaseLoop,
		p.reclaimLoop,
		p.every(p.cfg.CorrectInterval, "correct counters", p.correct),
		p.every(p.cfg.SnapshotInterval, "congestion snapshot", p.snapshot),
		p.every(StreamsInterval, "stream usage", p.streamUsage),
	}
	wg.Add(len(loops))
	for _, loop := range loops {
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	p.log.Info("dispatcher started", "readyCapacity", p.cfg.Ready.Capacity, "batch", p.cfg.BatchSize,
		"interval", p.cfg.Interval, "reclaimInterval", p.cfg.ReclaimInterval)
	p.Signal()
	wg.Wait()
	p.log.Info("dispatcher stopped")
	return nil
}

// room is how many jobs a release or reclaim may move now. It cannot choose
// their types, so it takes the least room among the types live workers
// serve (among the types on READY when no worker announced any): a type
// whose workers are gone never holds releases back. It also returns the
// measurement, whose rooms per type bound the release exactly
// ([redisq.WithReadySeq]).
func (p *Dispatcher) room(ctx context.Context, r *handoff.Room) (int, handoff.Rooms, error) {
	rs, err := r.Measure(ctx)
	if err != nil {
		return 0, rs, err
	}
	types := rs.Live
	if len(types) == 0 {
		for t := range rs.ByType {
			types = append(types, t)
		}
	}
	return rs.Least(types), rs, nil
}

// releaseLoop moves due jobs to READY and sleeps until the next one is
// due, at most Interval.
func (p *Dispatcher) releaseLoop(ctx context.Context) {
	fullWait, gatedWait := minFullWait, minWait
	for ctx.Err() == nil {
		start := time.Now()
		wait, st := p.release(ctx)
		p.d.Metrics.ObserveDispatchCycle(time.Since(start))
		switch st {
		case stateFull:
			wait = fullWait
			fullWait = min(2*fullWait, p.cfg.Interval)
		case stateGated:
			wait = gatedWait
			gatedWait = min(2*gatedWait, maxGatedWait, p.cfg.Interval)
		}
		if st != stateFull {
			fullWait = minFullWait
		}
		if st != stateGated {
			gatedWait = minWait
		}
		if !loop.Sleep(ctx, wait) {
			return
		}
	}
}

// releaseState tells the release loop how a cycle ended.
type releaseState int

const (
	stateNormal releaseState = iota // sleep the returned wait
	stateFull                       // READY was full: back off, growing
	stateGated                      // due jobs were held back: retry soon, growing
)

// release runs one release cycle and says how long to sleep after it.
func (p *Dispatcher) release(parent context.Context) (time.Duration, releaseState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	room, rooms, err := p.room(ctx, p.releaseRoom)
	if err != nil {
		p.log.Warn("READY size", "err", err)
		return p.cfg.Interval, stateNormal
	}
	if room == 0 {
		return 0, stateFull
	}
	want := min(room, p.cfg.BatchSize)
	// Each released job takes its type's room, net of what fetchers and
	// other dispatchers handed on since the measurement, in the script: a
	// due job whose type has no room left goes back into its group's queue.
	// a due job meets its destination's learned rate too: a parked job
	// does not come due faster than the rate allows
	learned, lerr := p.d.Queue.LearnedRates(ctx)
	if lerr != nil {
		p.log.Warn("reading the learned destination rates: using the last ones", "err", lerr)
	}
	res, err := p.d.Queue.Release(ctx, want, redisq.WithTypeRooms(rooms.ByType, rooms.Capacity), redisq.WithReadySeq(rooms.Seq),
		redisq.WithLearnedRates(learned))
	if err != nil {
		p.log.Warn("release failed", "err", err)
		return p.cfg.Interval, stateNormal
	}
	if len(res.Jobs) > 0 {
		ok, err := handoff.Publish(ctx, p.d, res.Jobs, p.packing(), handoff.SpanRelease)
		p.d.Metrics.DispatchMoved.Add(float64(len(ok)))
		if err != nil {
			p.log.Warn("publish of released jobs failed; the rest is re-published when the leases expire",
				"jobs", len(res.Jobs), "published", len(ok), "err", err)
		}
		p.log.Debug("released", "jobs", len(res.Jobs), "published", len(ok), "cancelled", res.Cancelled)
	}
	if len(res.RateHeld) > 0 || len(res.ReadyHeld) > 0 || res.ToGrants > 0 {
		// Due jobs over their types' rate limits or READY room went back
		// into their groups: the fetchers admit them once their types have
		// rate or room again. With shards every due job does: the
		// fetchers admit them under their shards' grants.
		if err := p.d.NC.Publish(p.d.Names.Notify("work"), nil); err != nil {
			p.log.Debug("notify", "err", err)
		}
	}
	switch {
	case res.Handled() >= want, res.TimeUp:
		return 0, stateNormal // more may be due
	case res.NextDueMs < 0:
		return p.cfg.Interval, stateNormal
	}
	until := time.Duration(res.NextDueMs-p.nowMs()) * time.Millisecond
	if until <= 0 {
		// Due by now: it fell due during the cycle, or the rate gate held
		// it back.
		return 0, stateGated
	}
	return max(minWait, min(until, p.cfg.Interval)), stateNormal
}

// nowMs is the time the queue's scripts use, by the local clock.
func (p *Dispatcher) nowMs() int64 {
	if c := p.d.Queue.Config().Clock; c != nil {
		return c().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// reclaimLoop re-publishes jobs whose admission lease expired, every
// ReclaimInterval (at once again after a full batch).
func (p *Dispatcher) reclaimLoop(ctx context.Context) {
	for ctx.Err() == nil {
		more := p.reclaim(ctx)
		wait := p.cfg.ReclaimInterval
		if more {
			wait = 0
		}
		if !loop.Sleep(ctx, wait) {
			return
		}
	}
}

// reclaim runs one reclaim cycle; it reports whether a full batch was
// taken (more may be waiting).
func (p *Dispatcher) reclaim(parent context.Context) (more bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	room, _, err := p.room(ctx, p.reclaimRoom)
	if err != nil {
		p.log.Warn("READY size", "err", err)
		return false
	}
	if room == 0 {
		return false
	}
	want := min(room, p.cfg.BatchSize)
	res, err := p.d.Queue.Reclaim(ctx, want)
	if err != nil {
		p.log.Warn("reclaim failed", "err", err)
		return false
	}
	if len(res.Jobs) == 0 {
		return false
	}
	ok, err := handoff.Publish(ctx, p.d, res.Jobs, p.packing(), handoff.SpanReclaim)
	p.d.Metrics.DispatchMoved.Add(float64(len(ok)))
	if err != nil {
		p.log.Warn("re-publish of reclaimed jobs failed", "jobs", len(res.Jobs), "published", len(ok), "err", err)
	}
	p.log.Info("re-published jobs whose lease expired", "jobs", len(res.Jobs), "published", len(ok))
	return len(res.Jobs) == want
}

func (p *Dispatcher) correct(ctx context.Context) error {
	n, err := p.d.Queue.CorrectCounters(ctx)
	if err == nil && n > 0 {
		p.log.Info("corrected drifted counters (non-ready, tenant quotas)", "counters", n)
	}
	return err
}

func (p *Dispatcher) snapshot(ctx context.Context) error {
	_, err := p.d.Queue.Snapshot(ctx)
	return err
}

// every returns a loop that calls fn each interval until ctx is cancelled.
func (p *Dispatcher) every(interval time.Duration, what string, fn func(context.Context) error) func(context.Context) {
	return func(ctx context.Context) {
		loop.Every(ctx, interval, func(ctx context.Context) {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cycleTimeout)
			if err := fn(cctx); err != nil {
				p.log.Warn(what+" failed", "err", err)
			}
			cancel()
		})
	}
}

// packing is how released and reclaimed jobs are packed into READY
// messages.
func (p *Dispatcher) packing() handoff.Packing {
	return p.cfg.Ready.Packing()
}
