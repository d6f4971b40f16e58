// Package stack runs any set of bulkaction's targets in one process from a
// config.Config (docs/ARCHITECTURE.md §2): a table of targets, each with its
// init function and the modules it depends on; [Start] opens what they need
// (connections, metrics, the HTTP endpoint), starts them and returns once
// every part is ready. `bulkaction run`, `bulkaction dev`, pkg/server, the
// CLI tests, the end-to-end tests and the benchmark all start stacks this
// one way.
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/services/gateway"
	"github.com/bulkaction/bulkaction/services/worker"
)

// Targets, in start order.
const (
	TargetAggregator = "aggregator"
	TargetWorker     = "worker"
	TargetDispatcher = "dispatcher"
	TargetFetcher    = "fetcher"
	TargetGateway    = "gateway"
)

// AllTargets lists every target in start order: consumers first, so that
// on shutdown (reverse order) producers stop before consumers, and the
// gateway, the entry from outside, stops first.
var AllTargets = []string{TargetAggregator, TargetWorker, TargetDispatcher, TargetFetcher, TargetGateway}

// PipelineTargets are the targets that move jobs: every target but the
// gateway.
var PipelineTargets = []string{TargetAggregator, TargetWorker, TargetDispatcher, TargetFetcher}

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

// Options configure [Start].
type Options struct {
	Config  *config.Config
	Targets []string
	// Conns, when set, are used instead of connecting (and not closed).
	Conns *conns.Conns
	// Mux serves the worker target; nil = the built-in processors.
	Mux *processor.Mux
	// HTTPAnyHost lets the built-in http processor call any host instead
	// of only Config.HTTPAllowedHosts (`bulkaction dev`, for trying things
	// out). It has no effect with a Mux of one's own.
	HTTPAnyHost bool
	// Log nil = slog.Default().
	Log *slog.Logger
	// Registry receives the metrics; nil = a new registry.
	Registry *prometheus.Registry
	// ReadyTimeout bounds how long Start waits for every part to be ready;
	// 0 = [DefaultReadyTimeout].
	ReadyTimeout time.Duration
	// GatewayKeys, when set, are the gateway's API keys instead of
	// Config.GatewayKeysFile (`bulkaction dev`, tests).
	GatewayKeys *gateway.Keys
}

// DefaultReadyTimeout is the default of [Options.ReadyTimeout].
const DefaultReadyTimeout = 30 * time.Second

// Stack is a running set of targets. Create it with [Start]; stop it with
// [Stack.Stop].
type Stack struct {
	Conns    *conns.Conns
	Metrics  *telemetry.Metrics
	Registry *prometheus.Registry
	// Server is the HTTP endpoint (/metrics, /healthz, /readyz); nil when
	// Config.HTTPAddr is empty.
	Server *telemetry.Server
	Deps   deps.Deps
	// Gateway is the gateway target, when the stack runs it.
	Gateway *gateway.Gateway

	opts     Options
	log      *slog.Logger
	closeFns []func()
	parts    []*part
	failed   chan struct{} // closed on the first failure of a part
	failOnce sync.Once
	mu       sync.Mutex
	err      error
	stopOnce sync.Once
}

// part is one running service of the stack.
type part struct {
	name   string
	svc    lifecycle.Service
	cancel context.CancelFunc
	done   chan struct{}
}

// Start opens the connections (unless o.Conns), builds every target of
// o.Targets from the target table, starts them in order with the HTTP
// endpoint, and returns once each has signalled that it is ready. The
// parts run until [Stack.Stop]; ctx bounds only the start.
func Start(ctx context.Context, o Options) (*Stack, error) {
	s := &Stack{opts: o, log: o.Log, failed: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With(telemetry.LogComponent, "stack")
	if err := s.build(ctx); err != nil {
		s.close()
		return nil, err
	}
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for _, p := range s.parts {
		select {
		case <-p.svc.Ready():
		case <-s.failed:
			return nil, s.stopWith(nil)
		case <-ctx.Done():
			// A part ready as ctx ends counts as started (select picks
			// at random among ready cases): its readiness may already be
			// served on /readyz, and ending ctx then is a stop, not a
			// failed start.
			select {
			case <-p.svc.Ready():
				continue
			default:
			}
			return nil, s.stopWith(ctx.Err())
		case <-timer.C:
			return nil, s.stopWith(fmt.Errorf("stack: %s not ready within %s", p.name, timeout))
		}
	}
	s.log.Info("bulkaction started", "targets", strings.Join(o.Targets, ","), "http", o.Config.HTTPAddr)
	return s, nil
}

// Run starts the stack, runs it until ctx ends or a part fails, and stops
// it: producers (fetcher, dispatcher) before consumers. In a process a
// worker started as its executor ([worker.IsExecutor]) it runs the
// executor instead.
func Run(ctx context.Context, o Options) error {
	if worker.IsExecutor() {
		// Started by a worker with WORKER_ISOLATION=process to run its
		// processors: nothing else.
		return worker.ServeExecutor(ctx, workerMux(o))
	}
	s, err := Start(ctx, o)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.Failed():
	}
	return s.Stop()
}

// Config is the configuration the stack runs with.
func (s *Stack) Config() *config.Config { return s.opts.Config }

// Failed is closed when a part of the stack failed; [Stack.Stop] then
// returns its error.
func (s *Stack) Failed() <-chan struct{} { return s.failed }

// Stop stops the targets in reverse start order, producers first, then the
// HTTP endpoint, and closes the connections it opened. It returns the
// first error of a part; later calls return the same.
func (s *Stack) Stop() error { return s.stopWith(nil) }

func (s *Stack) stopWith(cause error) error {
	s.stopOnce.Do(func() {
		for i := len(s.parts) - 1; i >= 0; i-- {
			s.parts[i].cancel()
			<-s.parts[i].done
		}
		s.close()
		s.log.Info("bulkaction stopped")
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = cause
	}
	return s.err
}

func (s *Stack) close() {
	for i := len(s.closeFns) - 1; i >= 0; i-- {
		s.closeFns[i]()
	}
	s.closeFns = nil
}

// fail records the first failure of a part and signals it.
func (s *Stack) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.failOnce.Do(func() {
		s.log.Error("target failed; stopping", "err", err)
		close(s.failed)
	})
}

// module is one entry of the target table: what it needs started before
// it, and how it is built.
type module struct {
	deps []string
	// init builds the module; a Service it returns is started by the stack.
	init func(ctx context.Context, s *Stack) (lifecycle.Service, error)
}

// Module names beside the targets.
const (
	moduleConns = "conns"
	moduleHTTP  = "http"
)

// modules is the target table.
var modules = map[string]module{
	moduleConns:      {init: initConns},
	moduleHTTP:       {deps: []string{moduleConns}, init: initHTTP},
	TargetFetcher:    {deps: []string{moduleConns}, init: initFetcher},
	TargetDispatcher: {deps: []string{moduleConns}, init: initDispatcher},
	TargetWorker:     {deps: []string{moduleConns}, init: initWorker},
	TargetAggregator: {deps: []string{moduleConns}, init: initAggregator},
	TargetGateway:    {deps: []string{moduleConns}, init: initGateway},
}

// order returns the modules to build for targets, every module after its
// dependencies, targets in the order given and the HTTP endpoint last.
func order(targets []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		if seen[name] {
			return nil
		}
		if slices.Contains(path, name) {
			return fmt.Errorf("stack: dependency cycle %s", strings.Join(append(path, name), " → "))
		}
		m, ok := modules[name]
		if !ok {
			return fmt.Errorf("unknown target %q", name)
		}
		for _, d := range m.deps {
			if err := visit(d, append(path, name)); err != nil {
				return err
			}
		}
		seen[name] = true
		out = append(out, name)
		return nil
	}
	for _, t := range append(slices.Clone(targets), moduleHTTP) {
		if err := visit(t, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// build builds the modules in dependency order and starts each service.
func (s *Stack) build(ctx context.Context) error {
	names, err := order(s.opts.Targets)
	if err != nil {
		return err
	}
	for _, name := range names {
		svc, err := modules[name].init(ctx, s)
		if err != nil {
			if slices.Contains(AllTargets, name) {
				return fmt.Errorf("%s: %w", name, err)
			}
			return err
		}
		if svc != nil {
			s.start(name, svc)
		}
	}
	return nil
}

// start runs svc with a context of its own, so that shutdown can go in
// order.
func (s *Stack) start(name string, svc lifecycle.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{name: name, svc: svc, cancel: cancel, done: make(chan struct{})}
	s.parts = append(s.parts, p)
	go func() {
		defer close(p.done)
		if err := svc.Run(ctx); err != nil {
			s.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

func initConns(ctx context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	s.Registry = s.opts.Registry
	if s.Registry == nil {
		s.Registry = prometheus.NewRegistry()
		s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.Metrics = telemetry.NewMetrics(s.Registry)
	s.Conns = s.opts.Conns
	if s.Conns == nil {
		c, err := conns.Connect(ctx, cfg, strings.Join(s.opts.Targets, ","), s.Metrics)
		if err != nil {
			return nil, err
		}
		s.Conns = c
		s.closeFns = append(s.closeFns, c.Close)
	}
	for _, w := range conns.CheckRedis(ctx, s.Conns.Redis) {
		s.log.Warn(w)
	}
	s.Deps = deps.Deps{
		NC: s.Conns.NC, JS: s.Conns.JS, Queue: s.Conns.Queue, Names: s.Conns.Names,
		Limits:  contracts.Limits{MaxPayloadBytes: cfg.MaxPayloadBytes, MaxMessageBytes: cfg.MaxMsgSize},
		Metrics: s.Metrics, Log: s.opts.Log,
	}.Fill()
	c := s.Conns
	s.Registry.MustRegister(telemetry.NewStateCollector(func(ctx context.Context) (telemetry.QueueState, error) {
		return conns.QueueState(ctx, c, cfg)
	}, 0))
	return nil, nil
}

func initHTTP(_ context.Context, s *Stack) (lifecycle.Service, error) {
	addr := s.opts.Config.HTTPAddr
	if addr == "" {
		return nil, nil
	}
	c := s.Conns
	names := c.Names
	checks := []telemetry.Check{
		{Name: "redis", Fn: c.Queue.Ping},
		{Name: "nats", Fn: func(ctx context.Context) error {
			if !c.NC.IsConnected() {
				return errors.New("not connected")
			}
			return c.NC.FlushWithContext(ctx)
		}},
		{Name: "streams", Fn: func(ctx context.Context) error {
			for _, st := range []string{names.StreamSubmit(), names.StreamReady(), names.StreamResult(), names.StreamEvents(), names.StreamDLQ()} {
				if _, err := c.JS.Stream(ctx, st); err != nil {
					return fmt.Errorf("%s: %w", st, err)
				}
			}
			return nil
		}},
	}
	log := s.opts.Log
	if log == nil {
		log = slog.Default()
	}
	s.Server = telemetry.NewServer(addr, s.Registry, checks, log.With(telemetry.LogComponent, "http"))
	return s.Server, nil
}
