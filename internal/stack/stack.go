// Package stack wires bulkaction's targets together from a config.Config:
// it connects to Redis and NATS, provisions the streams, builds the queue
// and runs any set of targets (fetcher, dispatcher, worker, aggregator) in
// one process, with the HTTP endpoint for metrics and health. `bulkaction
// run`, `bulkaction dev` and the end-to-end tests all start it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
	"github.com/bulkaction/bulkaction/services/dispatcher"
	"github.com/bulkaction/bulkaction/services/fetcher"
	"github.com/bulkaction/bulkaction/services/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

// Targets, in start order.
const (
	TargetAggregator = "aggregator"
	TargetWorker     = "worker"
	TargetDispatcher = "dispatcher"
	TargetFetcher    = "fetcher"
)

// AllTargets lists every target in start order: consumers first, so that
// on shutdown (reverse order) producers stop before consumers.
var AllTargets = []string{TargetAggregator, TargetWorker, TargetDispatcher, TargetFetcher}

// ParseTargets parses a comma-separated target list ("all" = every target).
func ParseTargets(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return AllTargets, nil
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !slices.Contains(AllTargets, t) {
			return nil, fmt.Errorf("unknown target %q (targets: %s, or all)", t, strings.Join(AllTargets, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no target given")
	}
	// keep start order
	slices.SortFunc(out, func(a, b string) int { return slices.Index(AllTargets, a) - slices.Index(AllTargets, b) })
	return out, nil
}

// Conns are the shared connections of a process.
type Conns struct {
	Redis redis.UniversalClient
	NC    *nats.Conn
	JS    jetstream.JetStream
	Queue *redisq.Queue
	Names contracts.Names
}

// Close closes the connections (draining NATS).
func (c *Conns) Close() {
	if c.NC != nil {
		_ = c.NC.Drain()
		deadline := time.Now().Add(5 * time.Second)
		for !c.NC.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		c.NC.Close()
	}
	if c.Redis != nil {
		_ = c.Redis.Close()
	}
}

// QueueConfig maps the settings to the queue's configuration.
func QueueConfig(cfg *config.Config) redisq.Config {
	return redisq.Config{
		Prefix:            cfg.RedisPrefix,
		Alpha:             cfg.Alpha,
		Mode:              cfg.AdmissionMode,
		GlobalLimit:       cfg.GlobalRps,
		Window:            config.Ms(cfg.RateLimitWindowMs),
		Burst:             config.Ms(cfg.PacingBurstMs),
		ActiveStaleAfter:  config.Ms(cfg.ActiveGroupStaleMs),
		Lease:             config.Ms(cfg.LeaseMs),
		BaseBackoff:       config.Ms(cfg.BaseBackoffMs),
		MaxBackoff:        config.Ms(cfg.MaxBackoffMs),
		DisableCongestion: !cfg.CongestionEnabled,
		JobTTL:            cfg.JobTTL,
		GroupTTL:          cfg.GroupTTL,
	}
}

// StreamSettings maps the settings to the streams' configuration.
func StreamSettings(cfg *config.Config) natsutil.StreamSettings {
	storage := jetstream.FileStorage
	if cfg.StreamStorage == "memory" {
		storage = jetstream.MemoryStorage
	}
	return natsutil.StreamSettings{
		Storage: storage, Replicas: cfg.StreamReplicas, MaxAge: cfg.StreamMaxAge,
		DuplicateWindow: cfg.DuplicateWindow, MaxMsgSize: int32(cfg.MaxMsgSize),
	}
}

// Connect opens Redis and NATS, provisions the streams and builds the queue.
// obs receives script durations (nil = none).
func Connect(ctx context.Context, cfg *config.Config, name string, obs redisq.Observer) (*Conns, error) {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("BULKACTION_REDIS_URL: %w", err)
	}
	if opt.PoolSize < 32 {
		opt.PoolSize = 32
	}
	c := &Conns{Redis: redis.NewClient(opt), Names: contracts.Names{Prefix: cfg.SubjectPrefix}}
	if err := c.Redis.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", cfg.RedisURL, err)
	}
	qc := QueueConfig(cfg)
	qc.Observer = obs
	if c.Queue, err = redisq.New(ctx, c.Redis, qc); err != nil {
		c.Close()
		return nil, err
	}
	c.NC, err = nats.Connect(cfg.NatsURL, nats.Name("bulkaction "+name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("nats %s: %w", cfg.NatsURL, err)
	}
	if c.JS, err = jetstream.New(c.NC); err != nil {
		c.Close()
		return nil, err
	}
	if err := natsutil.EnsureStreams(ctx, c.JS, c.Names, StreamSettings(cfg)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Options configure Run.
type Options struct {
	Config  *config.Config
	Targets []string
	// Conns, when set, are used instead of connecting (and not closed).
	Conns *Conns
	// Mux serves the worker target; nil = the built-in processors.
	Mux *processor.Mux
	// Log nil = slog.Default().
	Log *slog.Logger
	// Registry receives the metrics; nil = a new registry.
	Registry *prometheus.Registry
	// Started, when set, is called once every target runs.
	Started func(*Stack)
	// FetcherBeforePublish is the fetcher's fault-injection hook (tests).
	FetcherBeforePublish func([]redisq.LeasedJob) error
}

// Stack is a running set of targets.
type Stack struct {
	Conns    *Conns
	Metrics  *telemetry.Metrics
	Registry *prometheus.Registry
	Server   *telemetry.Server
	Deps     deps.Deps
	Worker   *worker.Worker
	Agg      *aggregator.Aggregator
}

type runner interface{ Run(context.Context) error }

// Run starts the targets and blocks until ctx ends; then it stops producers
// before consumers (fetcher, dispatcher, worker, aggregator) and returns.
func Run(ctx context.Context, o Options) error {
	cfg := o.Config
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := telemetry.NewMetrics(reg)
	conns := o.Conns
	if conns == nil {
		var err error
		if conns, err = Connect(ctx, cfg, strings.Join(o.Targets, ","), m); err != nil {
			return err
		}
		defer conns.Close()
	}
	names := conns.Names
	d := deps.Deps{
		NC: conns.NC, JS: conns.JS, Queue: conns.Queue, Names: names,
		Limits: contracts.Limits{MaxPayloadBytes: cfg.MaxPayloadBytes}, Metrics: m, Log: log,
	}.Fill()
	st := &Stack{Conns: conns, Metrics: m, Registry: reg, Deps: d}

	reg.MustRegister(telemetry.NewStateCollector(func(ctx context.Context) (telemetry.QueueState, error) {
		return QueueState(ctx, conns, cfg)
	}, 0))

	type started struct {
		name string
		r    runner
	}
	var runners []started
	for _, t := range o.Targets {
		switch t {
		case TargetFetcher:
			f, err := fetcher.New(fetcher.Config{
				ReadyCapacity: cfg.ReadyCapacity(), AdmitBatchSize: cfg.AdmitBatchSize, IngestBatchSize: cfg.IngestBatchSize,
				BeforePublish: o.FetcherBeforePublish,
			}, d)
			if err != nil {
				return fmt.Errorf("fetcher: %w", err)
			}
			runners = append(runners, started{t, f})
		case TargetDispatcher:
			ds, err := dispatcher.New(dispatcher.Config{
				ReadyCapacity: cfg.ReadyCapacity(), BatchSize: cfg.DispatchBatchSize, Interval: config.Ms(cfg.DispatchIntervalMs),
			}, d)
			if err != nil {
				return fmt.Errorf("dispatcher: %w", err)
			}
			runners = append(runners, started{t, ds})
		case TargetWorker:
			mux := o.Mux
			if mux == nil {
				mux = processor.NewMux()
				builtin.Register(mux, builtin.Options{DefaultURL: cfg.HTTPProcessorURL})
			}
			var types []string
			for _, s := range strings.Split(cfg.WorkerTypes, ",") {
				if s = strings.TrimSpace(s); s != "" {
					types = append(types, s)
				}
			}
			// The worker's zero values mean its defaults; the settings' zero
			// means none.
			retries := cfg.MaxRetryCount
			if retries == 0 {
				retries = -1
			}
			grace := config.Ms(cfg.ShutdownGracePeriodMs)
			if grace == 0 {
				grace = -1
			}
			w, err := worker.New(worker.Config{
				Concurrency: cfg.WorkerCount, Types: types, JobTimeout: config.Ms(cfg.JobTimeoutMs), MaxRetryCount: retries,
				MaxDeliveries: cfg.MaxDeliveries, ShutdownGrace: grace,
			}, mux, d)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			st.Worker = w
			runners = append(runners, started{t, w})
		case TargetAggregator:
			a, err := aggregator.New(aggregator.Config{BatchSize: cfg.ResultBatchSize, StuckAfter: cfg.StuckAfter}, d)
			if err != nil {
				return fmt.Errorf("aggregator: %w", err)
			}
			st.Agg = a
			runners = append(runners, started{t, a})
		default:
			return fmt.Errorf("unknown target %q", t)
		}
	}

	var checks []telemetry.Check
	checks = append(checks,
		telemetry.Check{Name: "redis", Fn: conns.Queue.Ping},
		telemetry.Check{Name: "nats", Fn: func(ctx context.Context) error {
			if !conns.NC.IsConnected() {
				return errors.New("not connected")
			}
			return conns.NC.FlushWithContext(ctx)
		}},
		telemetry.Check{Name: "streams", Fn: func(ctx context.Context) error {
			for _, s := range []string{names.StreamSubmit(), names.StreamReady(), names.StreamResult(), names.StreamEvents(), names.StreamDLQ()} {
				if _, err := conns.JS.Stream(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
			return nil
		}},
	)

	// Every target gets its own context so shutdown can go in order.
	var wg sync.WaitGroup
	errs := make(chan error, len(runners)+1)
	cancels := make([]context.CancelFunc, len(runners))
	dones := make([]chan struct{}, len(runners))
	for i, r := range runners {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		cancels[i] = cancel
		dones[i] = make(chan struct{})
		wg.Add(1)
		go func(i int, r started) {
			defer wg.Done()
			defer close(dones[i])
			if err := r.r.Run(rctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
			}
		}(i, r)
	}
	srvCtx, srvCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer srvCancel()
	if cfg.HTTPAddr != "" {
		st.Server = telemetry.NewServer(cfg.HTTPAddr, reg, checks, log)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.Server.Run(srvCtx); err != nil {
				errs <- fmt.Errorf("http: %w", err)
			}
		}()
	}
	log.Info("bulkaction started", "targets", strings.Join(o.Targets, ","), "http", cfg.HTTPAddr)
	if o.Started != nil {
		if st.Server != nil {
			select {
			case <-st.Server.Ready():
			case <-time.After(5 * time.Second):
			}
		}
		o.Started(st)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		log.Error("target failed; stopping", "err", runErr)
	}
	// Stop in reverse start order: producers (fetcher, dispatcher) first.
	for i := len(runners) - 1; i >= 0; i-- {
		cancels[i]()
		<-dones[i]
	}
	srvCancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if runErr == nil {
			runErr = err
		}
	}
	log.Info("bulkaction stopped")
	return runErr
}

// QueueState reads the queue gauges from Redis and JetStream.
func QueueState(ctx context.Context, c *Conns, cfg *config.Config) (telemetry.QueueState, error) {
	var s telemetry.QueueState
	levels, err := c.Queue.GroupsPerLevel(ctx)
	if err != nil {
		return s, err
	}
	s.GroupsPerLevel = map[string]int64{}
	for l, n := range levels {
		s.GroupsPerLevel[string(l)] = n
	}
	k := c.Queue.Keys()
	pipe := c.Redis.Pipeline()
	nr := pipe.ZCard(ctx, k.NonReadyQueue())
	inf := pipe.ZCard(ctx, k.Inflight())
	if _, err := pipe.Exec(ctx); err != nil {
		return s, err
	}
	s.NonReadySize, s.InflightSize = nr.Val(), inf.Val()
	sum, err := c.Queue.SystemCongestion(ctx)
	if err != nil {
		return s, err
	}
	s.ActiveGroups = sum.ActiveGroups
	s.CongestionLevels = map[string]int64{}
	for l, n := range sum.GroupsPerLevel {
		s.CongestionLevels[string(l)] = n
	}
	ready, err := natsutil.StreamMsgs(ctx, c.JS, c.Names.StreamReady())
	if err != nil {
		return s, err
	}
	s.ReadySize = int64(ready)
	s.GlobalRateLimit = float64(cfg.GlobalRps) / (float64(cfg.RateLimitWindowMs) / 1000)
	return s, nil
}
