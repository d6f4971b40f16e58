package fetcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/setting"
	"github.com/bulkaction/bulkaction/internal/telemetry"
)

// TracerName is the name of the tracer the fetcher's spans come from.
const TracerName = "github.com/bulkaction/bulkaction/services/fetcher"

// Defaults of the [Config] fields.
const (
	// DefaultAdmitBatchSize is the default of [Config.AdmitBatchSize].
	DefaultAdmitBatchSize = 256
	// DefaultIngestBatchSize is the default of [Config.IngestBatchSize].
	DefaultIngestBatchSize = 500
	// DefaultDurable is the default of [Config.Durable].
	DefaultDurable = "fetcher"
	// DefaultMaxIdle is the default of [Config.MaxIdle].
	DefaultMaxIdle = time.Second
	// DefaultAckWait is how long the SUBMIT consumer waits for an ack
	// before redelivering a message.
	DefaultAckWait = 30 * time.Second
	// DefaultReplayWindow is the default of [Config.ReplayWindow].
	DefaultReplayWindow = time.Hour
)

// Dead-letter reasons of the fetcher, beside the validation reasons of
// package contracts.
const (
	// ReasonOverTotal: a new job of a group that is sealed and already has
	// its declared number of distinct jobs.
	ReasonOverTotal = "over_total"
	// ReasonGroupEnded: a job of a group that was cancelled or completed.
	ReasonGroupEnded = "group_ended"
	// ReasonOverQuota: a jobs message whose new jobs would take its tenant
	// beyond a tenant quota (docs/ARCHITECTURE.md §5): its most queued jobs
	// (tenant.maxQueuedJobs), or, for a message that would create its group,
	// its most active groups (tenant.maxActiveGroups). None of the message's
	// new jobs is stored.
	ReasonOverQuota = "over_quota"
	// ReasonBadSeal: a seal whose total differs from an earlier seal's, or
	// is below the number of distinct jobs already received.
	ReasonBadSeal = "bad_seal"
)

// Timing of the loops.
const (
	// retryDelay is the redelivery delay of a message whose state could not
	// be stored (Redis or DLQ unavailable).
	retryDelay = time.Second
	// minBackpressureWait and maxBackpressureWait bound the wait while
	// READY is full; it doubles on every full round.
	minBackpressureWait = 2 * time.Millisecond
	maxBackpressureWait = 50 * time.Millisecond
	// errorWait is the pause after a failed admission round.
	errorWait = 100 * time.Millisecond
	// cycleTimeout bounds one ingest batch or admission round; a round that
	// has started finishes even when Run's context is cancelled.
	cycleTimeout = 30 * time.Second
)

// Config configures a [Fetcher]. The zero value is valid: every zero field
// means its documented default.
type Config struct {
	// Ready is READY's room and packing: the fetcher admits jobs of a type
	// only while READY holds fewer than Ready.Capacity jobs of that type,
	// and packs an admission round's jobs as Ready says; zero fields mean
	// the defaults of [handoff.ReadyConfig] (160 jobs, packs of 16).
	Ready handoff.ReadyConfig
	// AdmitBatchSize is the most jobs one admission round takes; default 256.
	AdmitBatchSize int
	// IngestBatchSize is the most submit messages handled in one batch;
	// default 500. The consumer's MaxAckPending is four times this.
	IngestBatchSize int
	// Durable is the name of the submit consumer that every fetcher shares;
	// default "fetcher".
	Durable string
	// MaxIdle is the longest wait when no job is queued and no notification
	// arrives; default 1s.
	MaxIdle time.Duration
	// UnservedTypes says what becomes of jobs of a type no live worker
	// serves (workers announce their types with a heartbeat):
	// [UnservedHold] (the default, "") keeps them queued, their groups
	// keeping their place, and reports them; [UnservedAdmit] admits them
	// into their type's own READY room, where they wait for a worker. Either
	// way a type never takes the READY room of another.
	UnservedTypes string
	// ReplayWindow is how long SUBMIT keeps a message after it was applied
	// to Redis, so that a Redis restored from a snapshot up to this old
	// gets back what was applied after the snapshot (docs/ARCHITECTURE.md
	// §6.7); default [DefaultReplayWindow] (1h), negative: none (applied
	// messages are purged within a second or so). Applied messages are also
	// purged, whatever their age, once SUBMIT is half full.
	ReplayWindow time.Duration
}

// Values of [Config.UnservedTypes].
const (
	UnservedHold  = "hold"
	UnservedAdmit = "admit"
)

func (c *Config) setDefaults() {
	c.Ready = c.Ready.WithDefaults()
	setting.Default(&c.AdmitBatchSize, DefaultAdmitBatchSize)
	setting.Default(&c.IngestBatchSize, DefaultIngestBatchSize)
	setting.Default(&c.Durable, DefaultDurable)
	setting.Default(&c.MaxIdle, DefaultMaxIdle)
	setting.Default(&c.UnservedTypes, UnservedHold)
	setting.Default(&c.ReplayWindow, DefaultReplayWindow)
}

func (c *Config) validate() error {
	return setting.Check("fetcher", append(c.Ready.Rules(),
		setting.NotNegative("AdmitBatchSize", c.AdmitBatchSize),
		setting.NotNegative("IngestBatchSize", c.IngestBatchSize),
		setting.NotNegative("MaxIdle", c.MaxIdle),
		setting.Rule{Field: "UnservedTypes", Value: c.UnservedTypes, OK: c.UnservedTypes == UnservedHold || c.UnservedTypes == UnservedAdmit,
			Want: fmt.Sprintf("must be %q or %q", UnservedHold, UnservedAdmit)},
	)...)
}

// Fetcher ingests submissions and admits jobs to READY. Create it with
// [New] (the zero value is not usable); any number may run against the
// same Redis and NATS, sharing one durable submit consumer.
type Fetcher struct {
	lifecycle.Started
	cfg     Config
	d       deps.Deps
	log     *slog.Logger
	tracer  trace.Tracer
	settler *consume.Settler
	room    *handoff.Room
	// roomQuiet: the last admission round left nothing waiting, so the next
	// may reuse its measurement of READY (admit).
	roomQuiet bool
	heldLog   telemetry.WarnLimiter
	// destLog: jobs stored without their explicit destination (the
	// tenant's bound), logged at most once a minute per tenant
	destLog destWarn
	replay  replayState
	// wake wakes the admission loop: jobs were enqueued, by this fetcher
	// (notifyWork) or by another process (the work notification). origin
	// marks this fetcher's own notifications, which it does not need back.
	wake   chan struct{}
	origin []byte
	// shards, with more than one shard, are the shards this fetcher
	// holds and their grants (shards.go); nil with one
	shards *shardOwner
}

// New returns a Fetcher. d.NC, d.JS and d.Queue are required; the other
// dependencies take the defaults of [deps.Deps.Fill].
func New(cfg Config, d deps.Deps) (*Fetcher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if d.NC == nil || d.JS == nil || d.Queue == nil {
		return nil, errors.New("fetcher: deps NC, JS and Queue are required")
	}
	if err := d.Names.Validate(); err != nil {
		return nil, fmt.Errorf("fetcher: names: %w", err)
	}
	d = d.Fill()
	log := d.Log.With(telemetry.LogComponent, "fetcher")
	return &Fetcher{
		cfg:     cfg,
		d:       d,
		log:     log,
		tracer:  d.TracerProvider.Tracer(TracerName),
		settler: consume.NewSettler(d, log, retryDelay),
		room:    handoff.NewRoom(d, cfg.Ready.Capacity),
		heldLog: telemetry.WarnLimiter{Interval: time.Minute},
		wake:    make(chan struct{}, 1),
		origin:  []byte(nats.NewInbox()), // unique to this fetcher
	}, nil
}

// Run ingests and admits until ctx is cancelled, then stops taking
// messages, handles the ones already received, finishes the admission round
// under way, and returns nil. It returns an error only when it cannot
// start (the submit consumer or the notification subscription cannot be
// created).
func (f *Fetcher) Run(ctx context.Context) error {
	cons, err := f.d.JS.CreateOrUpdateConsumer(ctx, f.d.Names.StreamSubmit(), jetstream.ConsumerConfig{
		Durable:       f.cfg.Durable,
		Description:   "bulkaction fetchers: submissions into the fair queue",
		FilterSubject: f.d.Names.SubmitAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * f.cfg.IngestBatchSize,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("fetcher: submit consumer %s: %w", f.cfg.Durable, err)
	}
	sub, err := f.d.NC.Subscribe(f.d.Names.Notify("work"), func(m *nats.Msg) {
		if !bytes.Equal(m.Data, f.origin) {
			f.wakeAdmission()
		}
	})
	if err != nil {
		return fmt.Errorf("fetcher: subscribe %s: %w", f.d.Names.Notify("work"), err)
	}
	f.replay.base, f.replay.cons = ctx, cons
	// The tenant settings SUBMIT does not carry are copied from their
	// bucket into Redis at start too, not only by a replay: a write that
	// reached the bucket and not Redis (Redis failed in between) is
	// completed here. Bounded, so that a slow NATS does not hold the start.
	rctx, cancel := context.WithTimeout(ctx, replayWait)
	if err := f.restoreTenantSettings(rctx); err != nil && ctx.Err() == nil {
		f.log.Warn("tenant settings not restored from their bucket", "err", err)
	}
	cancel()
	// A Redis that restarted since the last position gets SUBMIT's replay
	// before anything else is applied (§6.7); a failure here is retried by
	// the ingest.
	if _, err := f.awaitCurrent(ctx); err != nil && ctx.Err() == nil {
		f.log.Warn("SUBMIT position", "err", err)
	}
	if f.shards, err = newShardOwner(ctx, f.d.Queue, string(f.origin), f.log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("fetcher: shards: %w", err)
	}
	ingest := consume.Loop{Consumer: cons, Batch: f.cfg.IngestBatchSize, Handle: f.ingest, Log: f.log, Name: f.cfg.Durable}
	var wg sync.WaitGroup
	if f.shards != nil {
		wg.Go(func() { f.shards.run(ctx, f.wakeAdmission) })
	}
	wg.Go(func() { ingest.Run(ctx) })
	wg.Go(func() { f.admitLoop(ctx, f.wake) })
	wg.Go(func() { f.windowsLoop(ctx) })
	wg.Go(func() { f.checkpointLoop(ctx, cons) })
	f.log.Info("fetcher started", "durable", f.cfg.Durable, "readyCapacity", f.cfg.Ready.Capacity,
		"admitBatch", f.cfg.AdmitBatchSize, "ingestBatch", f.cfg.IngestBatchSize)

	f.Signal()

	<-ctx.Done()
	// The ingest loop stops pulling and handles the batch it holds before
	// it returns.
	wg.Wait()
	f.replay.wg.Wait()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		f.log.Warn("unsubscribe", "err", err)
	}
	f.log.Info("fetcher stopped")
	return nil
}
