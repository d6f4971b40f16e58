package bench

import (
	"context"
	"fmt"
)

// latencySystem starts one system on env for a latency run and returns
// the run and what stops the system.
type latencySystem func(ctx context.Context, env *Env) (run func(rate float64) (LatencyResult, error), stop func(), err error)

// runSameRate compares the pipeline's latency with each peer's at the same
// offered rate, every run alone on fresh servers (as the million run):
// the peer at o.Load of the throughput it showed in the shared phase, then
// the pipeline at the rate the peer was offered. Nothing else runs beside
// either, and neither finds the other's data or leftover work. It adds the
// peer's rate and latencies (latency_same_rate_jobs_per_s_<peer>,
// latency_same_rate_p50_ms_<peer>, _p99_ms_<peer>), the pipeline's
// (latency_rate_jobs_per_s_at_rate_<peer>, latency_p50_ms_at_rate_<peer>
// and so on, to the result recorded and to the processor's start) and the
// ratios.
func runSameRate(ctx context.Context, o Options, sys map[string]bool, rep *Reporter) error {
	pipeline := func(ctx context.Context, env *Env) (func(float64) (LatencyResult, error), func(), error) {
		pl, err := startPipelineOn(ctx, o, env, nil)
		if err != nil {
			return nil, nil, err
		}
		run := func(rate float64) (LatencyResult, error) {
			return pl.Latency(ctx, rate, o.LatencyDuration, o.Warmup, o.Groups)
		}
		return run, func() { _ = pl.Close() }, nil
	}
	type peerSystem struct {
		name, suffix string
		start        latencySystem
	}
	var peers []peerSystem
	if sys[SystemAsynq] {
		peers = append(peers, peerSystem{SystemAsynq, "_asynq", func(ctx context.Context, env *Env) (func(float64) (LatencyResult, error), func(), error) {
			aq, err := StartAsynq(AsynqOptions{RedisAddr: env.RedisAddr(), DB: AsynqDB, Concurrency: o.Workers})
			if err != nil {
				return nil, nil, err
			}
			run := func(rate float64) (LatencyResult, error) { return aq.Latency(ctx, rate, o.LatencyDuration, o.Warmup) }
			return run, aq.Close, nil
		}})
	}
	if sys[SystemBullMQ] {
		peers = append(peers, peerSystem{SystemBullMQ, "_bullmq", func(ctx context.Context, env *Env) (func(float64) (LatencyResult, error), func(), error) {
			bq, err := StartBullMQ(ctx, BullMQOptions{
				RedisURL: env.RedisURL(BullMQDB), Concurrency: o.Workers, Dir: o.BullMQDir, Progress: o.Progress,
			})
			if err != nil {
				return nil, nil, err
			}
			run := func(rate float64) (LatencyResult, error) { return bq.Latency(ctx, rate, o.LatencyDuration, o.Warmup) }
			return run, bq.Close, nil
		}})
	}
	for _, p := range peers {
		tp, ok := rep.Get(FigThroughput + p.suffix)
		if !ok || tp <= 0 {
			continue
		}
		rate := o.Load * tp
		o.Progress(fmt.Sprintf("%s: latency at %.0f jobs/s for %s, alone on servers of its own", p.name, rate, o.LatencyDuration))
		l, err := latencyOn(ctx, p.start, rate)
		if err != nil {
			return fmt.Errorf("%s latency alone: %w", p.name, err)
		}
		peerRate := float64(l.Sent) / l.Duration.Seconds()
		rep.Add("latency_same_rate_jobs_per_s"+p.suffix, peerRate)
		rep.Add("latency_same_rate_p50_ms"+p.suffix, Ms(Percentile(l.Total, 50)))
		theirs := Ms(Percentile(l.Total, 99))
		rep.Add("latency_same_rate_p99_ms"+p.suffix, theirs)

		o.Progress(fmt.Sprintf("pipeline: latency at %s's rate, %.0f jobs/s for %s, alone on servers of its own", p.name, peerRate, o.LatencyDuration))
		ol, err := latencyOn(ctx, pipeline, peerRate)
		if err != nil {
			return fmt.Errorf("pipeline latency at %s's rate: %w", p.name, err)
		}
		rep.Add("latency_rate_jobs_per_s_at_rate"+p.suffix, float64(ol.Sent)/ol.Duration.Seconds())
		rep.Add(FigLatencyP50+"_at_rate"+p.suffix, Ms(Percentile(ol.Total, 50)))
		rep.Add(FigLatencyP99+"_at_rate"+p.suffix, Ms(Percentile(ol.Total, 99)))
		addStart(rep, "_at_rate"+p.suffix, ol)
		if theirs > 0 {
			rep.Add("latency_p99_same_rate_ratio_vs_"+p.name, Ms(Percentile(ol.Total, 99))/theirs)
			// Like for like: the peers' clocks stop when the processor starts.
			if len(ol.ToStart) > 0 {
				rep.Add("latency_start_p99_same_rate_ratio_vs_"+p.name, Ms(Percentile(ol.ToStart, 99))/theirs)
			}
		}
	}
	return nil
}

// latencyOn starts fresh servers and the system on them, runs its latency
// run at rate, and stops the system and the servers.
func latencyOn(ctx context.Context, start latencySystem, rate float64) (LatencyResult, error) {
	env, err := StartEnv()
	if err != nil {
		return LatencyResult{}, err
	}
	defer env.Close()
	run, stop, err := start(ctx, env)
	if err != nil {
		return LatencyResult{}, err
	}
	defer stop()
	l, err := run(rate)
	if err != nil {
		return LatencyResult{}, err
	}
	if len(l.Total) == 0 {
		return LatencyResult{}, fmt.Errorf("no job after the warm-up")
	}
	return l, nil
}
