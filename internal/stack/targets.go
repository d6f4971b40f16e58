package stack

import (
	"context"
	"strings"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/services/aggregator"
	"github.com/bulkaction/bulkaction/services/dispatcher"
	"github.com/bulkaction/bulkaction/services/fetcher"
	"github.com/bulkaction/bulkaction/services/gateway"
	"github.com/bulkaction/bulkaction/services/worker"
)

// The init functions of the targets: each maps the settings to its
// service's Config and builds it on the stack's dependencies. This file
// and package conns (the queue, the streams, READY's room) are the one
// place where the settings become the components' configurations; each
// Config applies its own defaults and checks itself.

// zeroIsNone maps a setting whose 0 means none (MAX_RETRY_COUNT,
// MAX_THROTTLES, SHUTDOWN_GRACE_PERIOD_MS, SUBMIT_REPLAY_WINDOW) to the
// service's field, whose 0 means its default and whose negative values
// mean none.
func zeroIsNone[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

func initFetcher(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	return fetcher.New(fetcher.Config{
		Ready: conns.Ready(cfg), AdmitBatchSize: cfg.AdmitBatchSize, IngestBatchSize: cfg.IngestBatchSize,
		UnservedTypes: cfg.UnservedTypes, ReplayWindow: zeroIsNone(cfg.SubmitReplayWindow),
	}, s.Deps)
}

func initDispatcher(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	return dispatcher.New(dispatcher.Config{
		Ready: conns.Ready(cfg), BatchSize: cfg.DispatchBatchSize, Interval: config.Ms(cfg.DispatchIntervalMs),
	}, s.Deps)
}

func initWorker(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	mux := workerMux(s.opts)
	var types []string
	for _, t := range strings.Split(cfg.WorkerTypes, ",") {
		if t = strings.TrimSpace(t); t != "" {
			types = append(types, t)
		}
	}
	return worker.New(worker.Config{
		Concurrency: cfg.WorkerCount, Types: types, JobTimeout: config.Ms(cfg.JobTimeoutMs),
		MaxRetryCount: zeroIsNone(cfg.MaxRetryCount), MaxThrottles: zeroIsNone(cfg.MaxThrottles),
		MaxDeliveries: cfg.MaxDeliveries, ShutdownGrace: zeroIsNone(config.Ms(cfg.ShutdownGracePeriodMs)),
		StateDir: cfg.WorkerStateDir, Isolation: cfg.WorkerIsolation,
	}, mux, s.Deps)
}

// workerMux is the worker's Mux: o.Mux, or the built-in processors.
func workerMux(o Options) *processor.Mux {
	if o.Mux != nil {
		return o.Mux
	}
	cfg := o.Config
	mux := processor.NewMux()
	builtin.Register(mux, builtin.Options{DefaultURL: cfg.HTTPProcessorURL, AllowedHosts: cfg.HTTPAllowedHosts,
		AllowAnyHost: o.HTTPAnyHost})
	return mux
}

func initAggregator(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	return aggregator.New(aggregator.Config{BatchSize: cfg.ResultBatchSize, StuckAfter: cfg.StuckAfter, GroupIdleTTL: cfg.GroupIdleTTL,
		// callbacks go where the http processor may go
		CallbackAllowedHosts: cfg.HTTPAllowedHosts, CallbackAllowAnyHost: s.opts.HTTPAnyHost,
		CallbackRetryFor: cfg.CallbackRetryFor, CallbackFirstRetry: cfg.CallbackFirstRetry, CallbackTimeout: cfg.CallbackTimeout,
	}, s.Deps)
}

func initGateway(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	gw, err := gateway.New(gateway.Config{
		Addr: cfg.GatewayAddr, KeysFile: cfg.GatewayKeysFile, Keys: s.opts.GatewayKeys,
		IdempotencyTTL: cfg.GatewayIdempotencyTTL, Heartbeat: cfg.GatewaySSEHeartbeat, SpoolDir: cfg.GatewaySpoolDir,
		ReadyCapacity: conns.Ready(cfg).Capacity, GroupTTL: cfg.GroupTTL,
		Limits: gateway.Limits{MaxBodyBytes: int64(cfg.GatewayMaxBodyBytes), MaxJobsPerRequest: int64(cfg.GatewayMaxJobsPerRequest),
			ReadHeaderTimeout: cfg.GatewayReadHeaderTimeout, BodyIdleTimeout: cfg.GatewayBodyIdleTimeout,
			SSEWriteTimeout: cfg.GatewaySSEWriteTimeout, TenantRequestRate: int64(cfg.GatewayTenantRequestRate),
			TenantJobRate: int64(cfg.GatewayTenantJobRate), TenantByteRate: int64(cfg.GatewayTenantByteRate), TenantConcurrentRequests: int64(cfg.GatewayTenantConcurrentReqs),
			TenantSSEStreams: int64(cfg.GatewayTenantSSEStreams), TenantSubmitBytes: conns.TenantSubmitBytes(cfg)},
		Callbacks: gateway.CallbackConfig{AllowedHosts: cfg.HTTPAllowedHosts, AllowAnyHost: s.opts.HTTPAnyHost,
			SecretGrace: cfg.CallbackSecretGrace},
	}, s.Deps)
	if err != nil {
		return nil, err
	}
	s.Gateway = gw
	return gw, nil
}
