package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/setting"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TracerName is the name of the tracer the worker's spans come from.
const TracerName = "github.com/bulkaction/bulkaction/services/worker"

// Defaults of [Config].
const (
	// DefaultConcurrency is the number of jobs a worker runs at once.
	DefaultConcurrency = 10
	// DefaultJobTimeout bounds one run of a processor.
	DefaultJobTimeout = 30 * time.Second
	// DefaultMaxRetryCount is the number of retries after retryable errors.
	DefaultMaxRetryCount = 3
	// DefaultMaxThrottles is how often a job may be rate limited and retried.
	DefaultMaxThrottles = 50
	// DefaultMaxDeliveries is how often one attempt may be claimed
	// before it becomes a FAILED result without running.
	DefaultMaxDeliveries = 5
	// DefaultShutdownGrace is how long running jobs may take to finish after
	// the worker is told to stop.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultAckWaitMargin is added to the job timeout for the default AckWait.
	DefaultAckWaitMargin = 15 * time.Second
	// DefaultDurable is the prefix of the consumer names.
	DefaultDurable = "worker"
	// ConsumerMaxAckPending is the least MaxAckPending of the READY consumers:
	// every worker instance sharing a consumer pulls only what it can run, so
	// the limit is a safety net, not the flow control. A Concurrency above it
	// raises it.
	ConsumerMaxAckPending = 10000
)

// Timing of the pull loops and of the hand-back paths.
const (
	// idleWait is how long a pull request waits for a message when the
	// consumer is empty; it also bounds how long stopping takes.
	idleWait = time.Second
	// nakDelay is the redelivery delay of a message handed back after a
	// transient failure (Redis or NATS unavailable).
	nakDelay = time.Second
	// settleTimeout bounds each Redis or NATS call made for one delivery; it
	// does not depend on Run's context, so a delivery in progress is settled
	// even while the worker stops.
	settleTimeout = 10 * time.Second
	// startCheckAfter is how long a further job of a pack may wait for a
	// slot after its claim and still start without looking at its group
	// again (start.lua): its claim saw the group as it was then, so no job
	// starts later than this after its group's cancel was applied. A
	// shorter wait needs no Redis call: checking every job that waited
	// at all held each slot for a round trip and more than halved the
	// throughput of short jobs.
	startCheckAfter = 50 * time.Millisecond
	// abandonWait is how long Run waits, after cancelling the jobs still
	// running at the end of the grace period, for their processors to return.
	abandonWait = 5 * time.Second
	// maxErrorLen is the longest error text put into a result or the job hash.
	maxErrorLen = 1024
)

// Config configures a [Worker]. The zero value is ready to use: every zero
// field means the default stated with it.
type Config struct {
	// Concurrency is the number of jobs run at once, across all types;
	// 0 means [DefaultConcurrency] (10). The worker never holds more READY
	// messages than it has free slots for: a type with no work waiting
	// keeps one slot for its pending pull (up to a second at a time), so
	// with more types than slots the idle types take turns.
	Concurrency int
	// Types are the job types to serve; nil or empty means every type the
	// Mux has ([processor.Mux.Types]). Each must have a processor in the Mux.
	Types []string
	// JobTimeout bounds one run of a processor, through its context; 0 means
	// [DefaultJobTimeout] (30 s). A job that times out is retried like any
	// other retryable error.
	JobTimeout time.Duration
	// MaxRetryCount is the number of retries after retryable errors, so a
	// job fails after MaxRetryCount+1 errors; 0 means [DefaultMaxRetryCount]
	// (3), a negative value means no retries (the first retryable error
	// fails the job). Rate-limited attempts do not count: see MaxThrottles.
	MaxRetryCount int
	// MaxThrottles is how often a job may be rate limited
	// ([processor.RateLimited], a 429) and retried before it fails; 0 means
	// [DefaultMaxThrottles] (50), a negative value means never retry a
	// rate-limited job.
	MaxThrottles int
	// MaxDeliveries is how often one attempt of a suspect job may run alone
	// in its worker: a job claimed again while still RUNNING as its
	// attempt (its worker stopped) runs with no other job beside it, and
	// one whose worker stopped during MaxDeliveries such runs (a poison
	// job, for example one whose processor crashes the worker) becomes a
	// FAILED result without running. Jobs handed back on purpose, or
	// while Redis was unreachable, spend none. 0 means
	// [DefaultMaxDeliveries] (5).
	MaxDeliveries int
	// ShutdownGrace is how long running jobs get to finish after Run's
	// context ends; then their contexts are cancelled and their messages
	// handed back for redelivery. 0 means [DefaultShutdownGrace] (30 s); a
	// negative value means no grace (cancel and hand back at once).
	ShutdownGrace time.Duration
	// AckWait is the READY consumers' ack wait: a message not acknowledged
	// or marked in progress for this long is delivered again. The worker
	// marks running jobs in progress every AckWait/3. 0 means JobTimeout +
	// [DefaultAckWaitMargin] (15 s).
	AckWait time.Duration
	// StateDir, when set, is a directory where the worker keeps the
	// acknowledgement subjects of the READY messages it holds (a file per
	// worker instance), so that the worker started next there after a
	// crash hands them back at once instead of after AckWait (held.go).
	// It must outlive the process but not be shared between hosts: an
	// emptyDir in Kubernetes. "" means none.
	StateDir string
	// Isolation is where processors run: [IsolationNone] (or "") in the
	// worker process, [IsolationProcess] in executor child processes that
	// run one job at a time (up to Concurrency of them), so that a
	// processor that crashes its process takes down only its own job
	// (executor.go). The program must then call [ServeExecutor] when
	// [IsExecutor] (pkg/server does).
	Isolation string
	// ExecutorCommand is the command that starts an executor with
	// [IsolationProcess]; nil means this program again, with the same
	// arguments.
	ExecutorCommand []string
	// Durable is the prefix of the durable consumer names: the consumer of
	// type t is "<Durable>-<t>". "" means [DefaultDurable] ("worker"). Worker
	// instances that share consumers must use the same Config apart from
	// Concurrency and ShutdownGrace.
	Durable string
}

func (c *Config) setDefaults(mux *processor.Mux) {
	setting.Default(&c.Concurrency, DefaultConcurrency)
	if len(c.Types) == 0 {
		c.Types = mux.Types()
	} else {
		c.Types = slices.Clone(c.Types)
		slices.Sort(c.Types)
		c.Types = slices.Compact(c.Types)
	}
	setting.Default(&c.JobTimeout, DefaultJobTimeout)
	// for these three a negative value means none
	c.MaxThrottles = max(setting.Or(c.MaxThrottles, DefaultMaxThrottles), 0)
	c.MaxRetryCount = max(setting.Or(c.MaxRetryCount, DefaultMaxRetryCount), 0)
	c.ShutdownGrace = max(setting.Or(c.ShutdownGrace, DefaultShutdownGrace), 0)
	setting.Default(&c.MaxDeliveries, DefaultMaxDeliveries)
	setting.Default(&c.AckWait, c.JobTimeout+DefaultAckWaitMargin)
	setting.Default(&c.Durable, DefaultDurable)
	setting.Default(&c.Isolation, IsolationNone)
	if c.Isolation == IsolationProcess && len(c.ExecutorCommand) == 0 {
		if exe, err := os.Executable(); err == nil {
			c.ExecutorCommand = append([]string{exe}, os.Args[1:]...)
		}
	}
}

func (c *Config) validate(mux *processor.Mux) error {
	if err := setting.Check("worker",
		setting.AtLeast("Concurrency", c.Concurrency, 1),
		setting.NotNegative("JobTimeout", c.JobTimeout),
		setting.AtLeast("MaxDeliveries", c.MaxDeliveries, 1),
		setting.AtLeast("AckWait", c.AckWait, time.Second),
		setting.ConsumerName("Durable", c.Durable),
	); err != nil {
		return err
	}
	switch {
	case len(c.Types) == 0:
		return errors.New("worker: no job types: register processors in the Mux or set Types")
	case c.Isolation != IsolationNone && c.Isolation != IsolationProcess:
		return fmt.Errorf("worker: Isolation %q: must be %q or %q", c.Isolation, IsolationNone, IsolationProcess)
	case c.Isolation == IsolationProcess && len(c.ExecutorCommand) == 0:
		return errors.New("worker: Isolation process: no ExecutorCommand, and the running executable is unknown")
	}
	have := mux.Types()
	for _, t := range c.Types {
		if !processor.ValidType(t) {
			return fmt.Errorf("worker: type %q: must match ^[A-Za-z0-9_-]{1,64}$", t)
		}
		if !slices.Contains(have, t) {
			return fmt.Errorf("worker: type %q: no processor registered in the Mux", t)
		}
	}
	return nil
}

// Worker runs jobs from the READY stream. Create it with [New] and start it
// with [Worker.Run]; a Worker runs once.
type Worker struct {
	lifecycle.Started
	settler *consume.Settler
	cfg     Config
	mux     *processor.Mux
	d       deps.Deps
	log     *slog.Logger
	tracer  trace.Tracer
	slots   *consume.Slots // one per running (or being pulled) job
	lane    chan struct{}  // held by the one suspect job that runs alone
	results *results       // gathers results into RESULT messages per group
	// warnLimit keeps failures that hit every job (Redis or NATS down) from
	// logging one warning per job.
	warnLimit telemetry.WarnLimiter
	held      *heldFile     // nil without Config.StateDir
	exec      *executors    // nil without IsolationProcess
	dests     *destReporter // nil without Config.AdaptiveRate
	starts    *starts       // checks jobs that waited for a slot before they start
	// holder names this worker in the claims it makes
	// ([redisq.ClaimHolder]): unique per Worker.
	holder string
}

// New returns a Worker that runs jobs with mux. cfg's zero fields take the
// defaults documented on [Config]; d.JS and d.Queue are required and d's
// other fields default as [deps.Deps.Fill] says.
func New(cfg Config, mux *processor.Mux, d deps.Deps) (*Worker, error) {
	if mux == nil {
		return nil, errors.New("worker: nil Mux")
	}
	if d.JS == nil || d.Queue == nil {
		return nil, errors.New("worker: deps JS and Queue are required")
	}
	cfg.setDefaults(mux)
	if err := cfg.validate(mux); err != nil {
		return nil, err
	}
	d = d.Fill()
	log := d.Log.With(telemetry.LogComponent, "worker")
	var x *executors
	if cfg.Isolation == IsolationProcess {
		x = &executors{argv: cfg.ExecutorCommand, size: cfg.Concurrency}
	}
	var dests *destReporter
	// With the adaptive rate on (redisq.AdaptiveConfig.Enabled), the
	// outcomes per destination go to its controller.
	if d.Queue.Config().Adaptive.Enabled {
		dests = newDestReporter()
	}
	return &Worker{
		dests:     dests,
		starts:    &starts{check: d.Queue.StartBatch},
		holder:    newHolderID(),
		exec:      x,
		cfg:       cfg,
		mux:       mux,
		d:         d,
		log:       log,
		settler:   consume.NewSettler(d, log, nakDelay),
		tracer:    d.TracerProvider.Tracer(TracerName),
		slots:     consume.NewSlots(cfg.Concurrency),
		lane:      make(chan struct{}, 1),
		results:   newResults(d, ResultLinger),
		warnLimit: telemetry.WarnLimiter{Interval: time.Second},
	}, nil
}

// Config returns the worker's configuration with the defaults filled in.
func (w *Worker) Config() Config {
	c := w.cfg
	c.Types = slices.Clone(c.Types)
	return c
}

// ConsumerName returns the name of the durable READY consumer of jobType:
// "<Durable>-<jobType>".
func (w *Worker) ConsumerName(jobType string) string { return w.cfg.Durable + "-" + jobType }

func (w *Worker) consumerConfig(jobType string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:     w.ConsumerName(jobType),
		Description: "bulkaction workers of job type " + jobType,
		// its jobs alone and in packs (contracts.Names.ReadyPack)
		FilterSubjects: w.d.Names.ReadyFilters(jobType),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        w.cfg.AckWait,
		MaxDeliver:     -1, // deliveries are counted by the worker (MaxDeliveries)
		MaxAckPending:  max(w.cfg.Concurrency, ConsumerMaxAckPending),
	}
}

// Run creates or updates the READY consumers and runs jobs until ctx ends.
// Then it stops pulling, lets running jobs finish within the shutdown grace,
// cancels and hands back the rest, and returns nil. It returns an error only
// when a consumer cannot be set up before ctx ends, or, with
// IsolationProcess, when its executors cannot be started.
func (w *Worker) Run(ctx context.Context) error {
	consumers := make([]jetstream.Consumer, len(w.cfg.Types))
	for i, t := range w.cfg.Types {
		c, err := w.d.JS.CreateOrUpdateConsumer(ctx, w.d.Names.StreamReady(), w.consumerConfig(t))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("worker: consumer %s: %w", w.ConsumerName(t), err)
		}
		consumers[i] = c
	}

	if w.cfg.StateDir != "" {
		h, left, before, err := openHeld(w.cfg.StateDir, w.cfg.Durable, w.holder)
		if err != nil {
			w.log.Warn("state directory unusable: after a crash, held messages come back after AckWait", "dir", w.cfg.StateDir, "err", err)
		} else {
			w.held = h
			defer h.close()
			if before != "" {
				// The worker before stopped: its claims no longer keep the
				// jobs it held from running again at once.
				gctx, cancel := context.WithTimeout(ctx, settleTimeout)
				if err := w.d.Queue.HolderGone(gctx, before); err != nil {
					w.log.Warn("declaring the worker before gone: its jobs run again once its claims expire", "err", err)
				}
				cancel()
			}
			if len(left) > 0 {
				if err := recoverHeld(w.d.NC, left); err != nil {
					w.log.Warn("handing back the messages of the worker before", "messages", len(left), "err", err)
				} else {
					w.log.Warn("handed back the messages the worker before held (it stopped without settling them)", "messages", len(left))
				}
			}
		}
	}
	if w.exec != nil {
		// The executors are started before any job is taken: a job does
		// not wait for a process to start.
		if err := w.exec.start(); err != nil {
			w.exec.close(abandonWait)
			return fmt.Errorf("worker: executors (%s): %w", IsolationProcess, err)
		}
	}
	jobs := newTracker(ctx)
	var loops sync.WaitGroup
	for i, t := range w.cfg.Types {
		loop := consume.Loop{Consumer: consumers[i], Batch: w.cfg.Concurrency, Slots: w.slots, Log: w.log,
			Name: w.ConsumerName(t), IdleWait: idleWait, ErrorWait: nakDelay,
			Handle: func(ctx context.Context, msgs []jetstream.Msg) { w.start(ctx, t, msgs, jobs) }}
		loops.Go(func() { loop.Run(ctx) })
	}
	// Announce the types served before taking work, then keep them live:
	// admission gives READY room only to types a live worker serves.
	w.announce(ctx)
	// The beats outlive ctx: they keep the jobs in hand alive through the
	// shutdown grace.
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	var beat sync.WaitGroup
	beat.Go(func() { jobs.beat(beatCtx, w.cfg.AckWait/3) })
	beat.Go(func() { w.renewClaims(beatCtx, jobs) })
	beat.Go(func() { loop.Every(beatCtx, AnnounceEvery, func(context.Context) { w.announce(ctx) }) })
	if w.dests != nil {
		beat.Go(func() { loop.Every(beatCtx, DestReportEvery, w.reportDestinations) })
		defer w.reportDestinations(beatCtx) // what the last jobs saw
	}
	defer func() {
		stopBeat()
		beat.Wait()
	}()
	w.log.Info("worker started", "types", w.cfg.Types, "concurrency", w.cfg.Concurrency)
	w.Signal()
	<-ctx.Done()
	w.results.flushAll() // results gathering now need not wait for their linger
	loops.Wait()

	if !jobs.wait(w.cfg.ShutdownGrace) {
		// The jobs handed back run again at once elsewhere: this worker's
		// claims no longer hold them (docs/ARCHITECTURE.md §6.3).
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		if err := w.d.Queue.HolderGone(gctx, w.holder); err != nil {
			w.warn("declaring the worker's claims void failed: the jobs handed back run again once they expire", "err", err)
		}
		cancel()
		n := jobs.abandon()
		w.log.Warn("shutdown grace over: cancelled running jobs and handed them back", "jobs", n,
			"grace", w.cfg.ShutdownGrace)
		if !jobs.wait(abandonWait) {
			w.log.Warn("processors still running after cancellation", "wait", abandonWait)
		}
	}
	jobs.cancel(errShutdown)
	if w.exec != nil {
		w.exec.close(abandonWait)
	}
	// Acks are sent without waiting; make sure the server has them before
	// the caller closes the connection.
	if err := w.d.NC.FlushTimeout(flushTimeout); err != nil {
		w.log.Warn("flushing acks on shutdown", "err", err)
	}
	w.log.Info("worker stopped")
	return nil
}

// AnnounceEvery is how often a worker announces the job types it serves;
// an announcement lasts three times as long.
const AnnounceEvery = 5 * time.Second

// announce records in Redis that this worker serves its types; a failure
// is logged (the next announcement retries).
func (w *Worker) announce(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := w.d.Queue.AnnounceTypes(actx, w.cfg.Types, 3*AnnounceEvery); err != nil {
		w.warn("announcing job types failed", "types", w.cfg.Types, "err", err)
	}
}

// flushTimeout bounds the final flush of acks on shutdown.
const flushTimeout = 5 * time.Second

// start handles the deliveries of one pull in a goroutine of their own:
// they are claimed together, and each claimed job then runs in its own
// goroutine, which gives back the slot its message was pulled with.
// Messages that arrive after ctx ended are handed back at once.
func (w *Worker) start(ctx context.Context, jobType string, msgs []jetstream.Msg, jobs *tracker) {
	if ctx.Err() != nil {
		for _, m := range msgs {
			_ = m.Nak()
		}
		w.slots.Release(len(msgs))
		return
	}
	if err := w.held.add(msgs); err != nil {
		w.warn("held file not written: after a crash these messages come back after AckWait", "err", err)
	}
	jobs.add(1)
	go func() {
		defer jobs.done()
		w.handle(ctx, jobType, msgs, jobs)
	}()
}

// errShutdown is the cause of a job context cancelled when the shutdown
// grace ran out.
var errShutdown = errors.New("worker: shutting down")

// tracker knows the deliveries whose processor is running, so that the
// shutdown can cancel them and hand their messages back.
type tracker struct {
	wg       sync.WaitGroup // every batch and delivery being handled
	handling atomic.Int64   // batches and deliveries being handled, as counted by wg
	base     context.Context
	cancel   context.CancelCauseFunc
	mu       sync.Mutex
	closed   bool
	running  map[*delivery]struct{}
	held     map[*message]struct{} // messages with claimed jobs not settled yet
}

// delivery is one job whose processor runs. Exactly one of finish and
// the shutdown's abandon settles it.
type delivery struct {
	msg     *message
	settled bool // guarded by tracker.mu
}

// add counts n more batches or deliveries being handled; done ends one.
func (t *tracker) add(n int) {
	t.wg.Add(n)
	t.handling.Add(int64(n))
}

func (t *tracker) done() {
	t.handling.Add(-1)
	t.wg.Done()
}

// beat marks every held message in progress each interval, until ctx
// ends, so that long jobs are not delivered again, nor the jobs of a pack
// waiting for a slot while others of it run.
func (t *tracker) beat(ctx context.Context, interval time.Duration) {
	var msgs []jetstream.Msg
	loop.Every(ctx, interval, func(context.Context) {
		msgs = msgs[:0]
		t.mu.Lock()
		for m := range t.held {
			if !m.gone.Load() { // not handed back by the shutdown
				msgs = append(msgs, m.Msg)
			}
		}
		t.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	})
}

// claims returns the claimed jobs of every message held and not handed
// back: jobs running, waiting for a slot, or whose results wait for their
// PubAck.
func (t *tracker) claims() []redisq.Delivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ds []redisq.Delivery
	for m := range t.held {
		if !m.gone.Load() {
			ds = append(ds, m.claimed...)
		}
	}
	return ds
}

// renewClaims extends the claims of the jobs in the worker's hands every
// third of the queue's claim TTL until ctx ends, so that no repair takes
// a job that is still running, or whose result is still held, as lost
// (docs/ARCHITECTURE.md §6.5). A failure is logged; the next round
// retries, and a claim lasts three rounds.
func (w *Worker) renewClaims(ctx context.Context, jobs *tracker) {
	loop.Every(ctx, w.d.Queue.Config().ClaimTTL/3, func(ctx context.Context) {
		ds := jobs.claims()
		if len(ds) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		_, err := w.d.Queue.RenewClaims(rctx, ds)
		cancel()
		if err != nil {
			w.warn("renewing the claims of running jobs failed", "jobs", len(ds), "err", err)
		}
	})
}

// newTracker returns a tracker whose job contexts outlive ctx: they end
// only when the shutdown grace is over.
func newTracker(ctx context.Context) *tracker {
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	return &tracker{base: base, cancel: cancel, running: map[*delivery]struct{}{}, held: map[*message]struct{}{}}
}

// hold keeps m in progress (beat) until unhold: from the claim of its jobs
// until the last of them is settled.
func (t *tracker) hold(m *message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m.held = t
	t.held[m] = struct{}{}
}

// unhold ends hold.
func (t *tracker) unhold(m *message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.held, m)
}

// begin registers a delivery about to run its processor; ok is false when
// the worker has already handed back its running jobs, and the caller must
// hand msg back itself.
func (t *tracker) begin(msg *message) (d *delivery, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	d = &delivery{msg: msg}
	t.running[d] = struct{}{}
	return d, true
}

// finish ends a delivery's run; false means the shutdown already handed
// its message back and the caller must not settle it.
func (t *tracker) finish(d *delivery) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.running, d)
	if d.settled {
		return false
	}
	d.settled = true
	return true
}

// abandon cancels the contexts of every job and hands the messages of
// those still running back to JetStream for immediate redelivery, once
// each (a pack's other jobs are then not settled again). It returns how
// many jobs it handed back.
func (t *tracker) abandon() int {
	t.mu.Lock()
	t.closed = true
	var msgs []*message
	n := 0
	for d := range t.running {
		d.settled = true
		n++
		if !d.msg.gone.Swap(true) {
			msgs = append(msgs, d.msg)
		}
	}
	t.mu.Unlock()
	t.cancel(errShutdown)
	for _, m := range msgs {
		_ = m.Msg.Nak()
	}
	return n
}

// wait waits up to d for every delivery to be handled; true if they were.
func (t *tracker) wait(d time.Duration) bool {
	if t.handling.Load() == 0 {
		return true
	}
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}
