// Package server runs bulkaction targets inside a program of your own,
// typically a worker binary with your own processors:
//
//	mux := processor.NewMux()
//	mux.HandleFunc("send-email", sendEmail)
//	if err := server.RunWorker(ctx, mux); err != nil { ... }
//
// Configuration comes from the same BULKACTION_* environment variables as
// the bulkaction binary (NATS and Redis URLs, WORKER_COUNT, JOB_TIMEOUT_MS,
// MAX_RETRY_COUNT, HTTP_ADDR for /metrics and /healthz, ...). The worker
// serves the job types its Mux has (or BULKACTION_WORKER_TYPES).
//
// Processors run at least once: make them idempotent (a job's
// Job.IdempotencyKey is stable across attempts).
//
// With BULKACTION_WORKER_ISOLATION=process the worker runs each job in a
// child process, your program started again with the same arguments and
// BULKACTION_WORKER_EXECUTOR=1: there Run serves the processors of mux and
// nothing else, so call it with the same mux, and do before it only what
// the processors need (a crash in a processor then takes down that child
// and its job, not the worker).
//
// This is what a program of your own gets: the stock targets, wired and
// run exactly as the bulkaction binary runs them (settings, logging,
// tracing, /metrics and health, graceful shutdown), with your processors
// in the worker. It is the one public package that assembles a process;
// the services themselves are not public API.
package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/processor"
)

// RunWorker runs a worker with mux's processors until ctx ends, then lets
// in-flight jobs finish (BULKACTION_SHUTDOWN_GRACE_PERIOD_MS) and returns
// nil. A bad setting is an error naming its variable.
func RunWorker(ctx context.Context, mux *processor.Mux) error {
	return Run(ctx, []string{stack.TargetWorker}, mux)
}

// traceFlushTimeout bounds the export of the last spans when the process
// stops.
const traceFlushTimeout = 10 * time.Second

// Run runs the named targets ("fetcher", "dispatcher", "worker",
// "aggregator", "gateway") in this process, the worker with mux (nil = the
// built-in processors), until ctx ends. It is the one start-up path of a
// bulkaction process, the bulkaction binary's included: settings, the
// default logger, tracing (service name bulkaction-<targets joined by
// "-">; OTEL_SERVICE_NAME wins), the stack; once the stack has stopped, the
// spans not yet exported are, within [traceFlushTimeout], however ctx
// ended.
func Run(ctx context.Context, targets []string, mux *processor.Mux) error {
	if len(targets) == 0 {
		return errors.New("server: no target")
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	shutdown, err := telemetry.SetupTracing(ctx, "bulkaction-"+strings.Join(targets, "-"))
	if err != nil {
		return err
	}
	defer func() {
		// ctx has ended by now: the flush gets a context of its own
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		_ = shutdown(fctx)
	}()
	return stack.Run(ctx, stack.Options{Config: cfg, Targets: targets, Mux: mux, Log: log})
}
