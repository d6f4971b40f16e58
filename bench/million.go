package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/loop"
)

// millionSystem starts one system for the million run on env and returns
// the run and what stops the system.
type millionSystem struct {
	name, suffix string
	start        func(ctx context.Context, env *Env) (run func() (ThroughputResult, error), stop func(), err error)
}

// runMillion runs o.Million noop jobs through each system sys names, one
// after the other, each on a fresh redis-server (and, for the pipeline, a
// fresh NATS server) that is stopped afterwards, so that no run's memory or
// leftover work reaches the next. It adds each one's time, rate and peak
// Redis memory to rep, and the pipeline's ratios to each peer.
func runMillion(ctx context.Context, o Options, sys map[string]bool, rep *Reporter) error {
	var all []millionSystem
	if sys[SystemPipeline] {
		// First as the peers run (they delete a job once it has run), then
		// with the default retention, which keeps every succeeded job's hash.
		for _, keep := range []bool{false, true} {
			suffix := ""
			if keep {
				suffix = millionKeptSuffix
			}
			all = append(all, millionSystem{name: SystemPipeline, suffix: suffix, start: func(ctx context.Context, env *Env) (func() (ThroughputResult, error), func(), error) {
				pl, err := startPipelineOn(ctx, o, env, func(c *config.Config) { c.KeepSucceededJobs = keep })
				if err != nil {
					return nil, nil, err
				}
				run := func() (ThroughputResult, error) { return pl.Throughput(ctx, o.Million, o.Groups) }
				return run, func() { _ = pl.Close() }, nil
			}})
		}
	}
	if sys[SystemAsynq] {
		all = append(all, millionSystem{name: SystemAsynq, suffix: "_asynq", start: func(ctx context.Context, env *Env) (func() (ThroughputResult, error), func(), error) {
			aq, err := StartAsynq(AsynqOptions{RedisAddr: env.RedisAddr(), DB: AsynqDB, Concurrency: o.Workers})
			if err != nil {
				return nil, nil, err
			}
			return func() (ThroughputResult, error) { return aq.Throughput(ctx, o.Million) }, aq.Close, nil
		}})
	}
	if sys[SystemBullMQ] {
		all = append(all, millionSystem{name: SystemBullMQ, suffix: "_bullmq", start: func(ctx context.Context, env *Env) (func() (ThroughputResult, error), func(), error) {
			bq, err := StartBullMQ(ctx, BullMQOptions{
				RedisURL: env.RedisURL(BullMQDB), Concurrency: o.Workers, Dir: o.BullMQDir, Progress: o.Progress,
			})
			if err != nil {
				return nil, nil, err
			}
			return func() (ThroughputResult, error) { return bq.Million(ctx, o.Million) }, bq.Close, nil
		}})
	}
	rep.Add("million_jobs", float64(o.Million))
	for _, s := range all {
		if s.name == SystemPipeline {
			o.Progress(fmt.Sprintf("pipeline: million, %d jobs over %d groups, on servers of its own, KEEP_SUCCEEDED_JOBS=%t",
				o.Million, o.Groups, s.suffix == millionKeptSuffix))
		} else {
			o.Progress(fmt.Sprintf("%s: million, %d jobs, on a redis-server of its own", s.name, o.Million))
		}
		m, err := millionOn(ctx, s.start)
		if err != nil {
			return fmt.Errorf("%s million: %w", s.name, err)
		}
		o.Progress(fmt.Sprintf("%s: million: %.1f s, redis used_memory %.1f MB before, peak +%.1f MB (%d samples)",
			s.name, m.Elapsed.Seconds(), float64(m.BaseRedisBytes)/1e6, float64(m.PeakBytes())/1e6, m.Samples))
		rep.Add(FigMillion+s.suffix, m.Elapsed.Seconds())
		rep.Add(FigMillionJobsPerSec+s.suffix, m.JobsPerSec())
		rep.Add(FigMillionPeakRedis+s.suffix, float64(m.PeakBytes())/1e6)
		rep.Add(FigMillionPeakRedisPerJob+s.suffix, float64(m.PeakBytes())/float64(o.Million))
		if s.name != SystemPipeline && sys[SystemPipeline] {
			addRatio(rep, "million_time_ratio_vs_"+s.name, FigMillion, s.suffix)
			addRatio(rep, "million_peak_redis_ratio_vs_"+s.name, FigMillionPeakRedis, s.suffix)
			addRatio(rep, "million_peak_redis_ratio_vs_"+s.name+millionKeptSuffix, FigMillionPeakRedis+millionKeptSuffix, s.suffix)
		}
	}
	return nil
}

// millionKeptSuffix names the million run's figures of the pipeline with
// its default retention (KEEP_SUCCEEDED_JOBS=true).
const millionKeptSuffix = "_kept"

// startPipelineOn starts the pipeline on env's servers, as the runs on
// servers of their own (million, same rate) do; configure (nil = none)
// adjusts its configuration.
func startPipelineOn(ctx context.Context, o Options, env *Env, configure func(*config.Config)) (*Pipeline, error) {
	return StartPipeline(ctx, PipelineOptions{
		RedisURL: env.RedisURL(PipelineDB), NatsURL: env.NatsURL(), Workers: o.Workers, Log: o.Log, Configure: configure,
	})
}

// millionOn starts fresh servers and the system on them, runs it while
// sampling the redis-server's used_memory every [MemorySampleInterval], and
// stops the system and the servers.
func millionOn(ctx context.Context, start func(context.Context, *Env) (func() (ThroughputResult, error), func(), error)) (MillionResult, error) {
	env, err := StartEnv()
	if err != nil {
		return MillionResult{}, err
	}
	defer env.Close()
	run, stop, err := start(ctx, env)
	if err != nil {
		return MillionResult{}, err
	}
	defer stop()
	return sampleMemory(ctx, env, MemorySampleInterval, run)
}

// sampleMemory reads env's used_memory, runs f while reading it every
// interval, reads it once more when f returns, and returns f's result with
// the value before and the highest one.
func sampleMemory(ctx context.Context, env *Env, interval time.Duration, f func() (ThroughputResult, error)) (MillionResult, error) {
	base, err := env.UsedMemory(ctx)
	if err != nil {
		return MillionResult{}, err
	}
	m := MillionResult{BaseRedisBytes: base, PeakRedisBytes: base}
	sctx, cancel := context.WithCancel(ctx)
	var serr error
	var wg sync.WaitGroup
	wg.Go(func() {
		loop.Until(sctx, interval, func(sctx context.Context) bool {
			v, err := env.UsedMemory(sctx)
			if err != nil {
				if sctx.Err() == nil {
					serr = err
				}
				return false
			}
			m.Samples++
			m.PeakRedisBytes = max(m.PeakRedisBytes, v)
			return true
		})
	})
	r, err := f()
	cancel()
	wg.Wait()
	if err != nil {
		return m, err
	}
	if serr != nil {
		return m, serr
	}
	v, err := env.UsedMemory(ctx)
	if err != nil {
		return m, err
	}
	m.Samples++
	m.PeakRedisBytes = max(m.PeakRedisBytes, v)
	m.ThroughputResult = r
	return m, nil
}
