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
// service's Config and builds it on the stack's dependencies.

func initFetcher(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	return fetcher.New(fetcher.Config{
		ReadyCapacity: cfg.ReadyCapacity(), ReadyPackJobs: cfg.ReadyPackJobs, WorkerSlots: cfg.WorkerSlots(), AdmitBatchSize: cfg.AdmitBatchSize, IngestBatchSize: cfg.IngestBatchSize,
		UnservedTypes: cfg.UnservedTypes, ReplayWindow: cfg.ReplayWindow(),
	}, s.Deps)
}

func initDispatcher(_ context.Context, s *Stack) (lifecycle.Service, error) {
	cfg := s.opts.Config
	return dispatcher.New(dispatcher.Config{
		ReadyCapacity: cfg.ReadyCapacity(), ReadyPackJobs: cfg.ReadyPackJobs, WorkerSlots: cfg.WorkerSlots(), BatchSize: cfg.DispatchBatchSize, Interval: config.Ms(cfg.DispatchIntervalMs),
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
	// The worker's zero values mean its defaults; the settings' zero means
	// none.
	retries := cfg.MaxRetryCount
	if retries == 0 {
		retries = -1
	}
	throttles := cfg.MaxThrottles
	if throttles == 0 {
		throttles = -1
	}
	grace := config.Ms(cfg.ShutdownGracePeriodMs)
	if grace == 0 {
		grace = -1
	}
	return worker.New(worker.Config{
		Concurrency: cfg.WorkerCount, Types: types, JobTimeout: config.Ms(cfg.JobTimeoutMs), MaxRetryCount: retries,
		MaxDeliveries: cfg.MaxDeliveries, ShutdownGrace: grace, MaxThrottles: throttles, StateDir: cfg.WorkerStateDir,
		Isolation: cfg.WorkerIsolation,
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
		ReadyCapacity: cfg.ReadyCapacity(), GroupTTL: cfg.GroupTTL,
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
