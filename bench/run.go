package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Figure names every run prints (more may follow). A peer's figures are the
// pipeline's names with the peer's suffix ("_asynq", "_bullmq"); ratios are
// the pipeline's figure divided by the peer's ("..._ratio_vs_asynq").
const (
	FigThroughput       = "throughput_jobs_per_s"
	FigThroughputAsynq  = "throughput_jobs_per_s_asynq"
	FigThroughputBullMQ = "throughput_jobs_per_s_bullmq"
	FigThroughputRatio  = "throughput_ratio_vs_asynq"
	// FigThroughputRatioBullMQ is the pipeline's throughput divided by
	// BullMQ's.
	FigThroughputRatioBullMQ = "throughput_ratio_vs_bullmq"
	FigHoL                   = "hol_small_group_ms"
	FigHoLAsynq              = "hol_small_group_ms_asynq"
	FigHoLBullMQ             = "hol_small_group_ms_bullmq"
	FigLatencyP50            = "latency_p50_ms"
	FigLatencyP99            = "latency_p99_ms"
	// FigLatencyStartP50 and FigLatencyStartP99 time the pipeline's jobs
	// from submit to processor start, where the peers' latencies end.
	FigLatencyStartP50 = "latency_start_p50_ms"
	FigLatencyStartP99 = "latency_start_p99_ms"
	// FigCPU is the CPU time per job of a throughput run: the process's
	// plus the redis-server's.
	FigCPU = "cpu_us_per_job"
	// FigFloorNats is the throughput of the three stored JetStream hops of
	// a job alone ([NatsFloor]).
	FigFloorNats = "floor_nats_jobs_per_s"
	// FigCeiling bounds the pipeline's throughput on this machine: every
	// core busy with nothing but the NATS work of [NatsFloor] and the Redis
	// work the pipeline's throughput run measured per job.
	FigCeiling = "ceiling_jobs_per_s"
	// FigMillion is the million run's time, in seconds, from the first
	// submit until the last job is done ([Options.Million] jobs).
	FigMillion = "million_seconds"
	// FigMillionJobsPerSec is the million run's jobs divided by its time.
	FigMillionJobsPerSec = "million_jobs_per_s"
	// FigMillionPeakRedis is the highest used_memory of the system's
	// redis-server during the million run minus its value before, in MB
	// (10^6 bytes).
	FigMillionPeakRedis = "million_peak_redis_mb"
	// FigMillionPeakRedisPerJob is that peak in bytes per job.
	FigMillionPeakRedisPerJob = "million_peak_redis_bytes_per_job"
)

// Systems a run can measure: the pipeline and its peers.
const (
	SystemPipeline = "pipeline"
	SystemAsynq    = "asynq"
	SystemBullMQ   = "bullmq"
)

// Options configure [Run]. Zero fields take the defaults named on each.
type Options struct {
	// Jobs is the throughput run's size; 0 means 100,000.
	Jobs int
	// Groups is how many groups the throughput and latency runs spread
	// their jobs over; 0 means 10.
	Groups int
	// Workers is the pipeline's WorkerCount, asynq's Concurrency and the
	// concurrency of BullMQ's Worker; 0 means [DefaultWorkers].
	Workers int
	// Backlog and Small are the head-of-line run's large and small group
	// sizes; 0 means 50,000 and 100.
	Backlog, Small int
	// Million is the million run's size: that many noop jobs spread over
	// Groups groups through each system, each on servers of its own, timed
	// while its redis-server's memory is sampled. Unlike the other sizes, 0
	// leaves the run out (the benchmark's -e2e.million flag defaults to
	// [DefaultMillion]).
	Million int
	// LatencyDuration is how long the latency run submits; 0 means 10 s.
	LatencyDuration time.Duration
	// Load is the latency run's submit rate as a fraction of the measured
	// throughput; 0 means 0.5.
	Load float64
	// Rate, when set, is the pipeline's latency run's submit rate in jobs
	// per second instead (to compare builds at one offered load).
	Rate float64
	// Warmup is how much of the latency run's start is left out; 0 means
	// [DefaultWarmup].
	Warmup time.Duration
	// Only limits the run to the systems it names, separated by commas
	// ([SystemPipeline], [SystemAsynq], [SystemBullMQ]); "" means all of
	// them. The ratios need the pipeline and the peer.
	Only string
	// BullMQDir holds the BullMQ peer; "" means [DefaultBullMQDir].
	BullMQDir string
	// Log receives the pipeline services' logs; nil means none.
	Log *slog.Logger
	// Progress, when set, is called with a line before each phase.
	Progress func(string)
	// CPUProfile, when set, is the file a CPU profile of the pipeline's
	// throughput run (only that phase) is written to; the process's
	// allocation profiles at that phase's start and end go next to it, in
	// CPUProfile+".allocs0" and CPUProfile+".allocs".
	CPUProfile string
	// ScriptLog logs every Redis command during the pipeline's throughput
	// run and reports, through Progress, the time spent in each redisq
	// script per job. A diagnostic: it slows the server down.
	ScriptLog bool
}

func (o *Options) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Jobs, 100_000)
	def(&o.Groups, 10)
	def(&o.Workers, DefaultWorkers)
	def(&o.Backlog, 50_000)
	def(&o.Small, 100)
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = 10 * time.Second
	}
	if o.Load <= 0 {
		o.Load = 0.5
	}
	if o.Warmup <= 0 {
		o.Warmup = DefaultWarmup
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

// systems returns the systems o.Only names.
func (o *Options) systems() (map[string]bool, error) {
	all := []string{SystemPipeline, SystemAsynq, SystemBullMQ}
	m := map[string]bool{}
	if strings.TrimSpace(o.Only) == "" {
		for _, s := range all {
			m[s] = true
		}
		return m, nil
	}
	for s := range strings.SplitSeq(o.Only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(all, s) {
			return nil, fmt.Errorf("bench: Options.Only %q: %q is none of %s", o.Only, s, strings.Join(all, ", "))
		}
		m[s] = true
	}
	return m, nil
}

// peer is a system the pipeline is compared with. Its figures carry suffix.
type peer struct {
	name, suffix string
	sys          interface {
		Throughput(ctx context.Context, jobs int) (ThroughputResult, error)
		HeadOfLine(ctx context.Context, backlog, small int) (HoLResult, error)
		Latency(ctx context.Context, rate float64, d, warmup time.Duration) (LatencyResult, error)
		// CPU is the CPU time the system's process has used so far.
		CPU(ctx context.Context) (time.Duration, error)
	}
	tp float64 // measured throughput
}

// Run starts the servers and measures the pipeline and its peers (asynq,
// BullMQ): throughput, head-of-line delay, then latency at o.Load of each
// one's measured throughput, adding every figure to rep. Once those servers
// are stopped, each peer and then the pipeline run latency again at the
// peer's rate, each alone on servers of its own (runSameRate), and so does
// the million run ([Options.Million]).
func Run(ctx context.Context, o Options, rep *Reporter) error {
	o.setDefaults()
	sys, err := o.systems()
	if err != nil {
		return err
	}
	rep.Add("workers", float64(o.Workers))
	rep.Add("host_load_1m", loadAvg())
	if err := runShared(ctx, o, sys, rep); err != nil {
		return err
	}
	if sys[SystemPipeline] {
		if err := runSameRate(ctx, o, sys, rep); err != nil {
			return err
		}
	}
	if o.Million > 0 {
		if err := runMillion(ctx, o, sys, rep); err != nil {
			return err
		}
	}
	rep.Add("host_load_1m_end", loadAvg())
	return nil
}

// runShared runs the throughput, floor, head-of-line and latency phases of
// the systems sys names on one redis-server (a database each) and one NATS
// server, stopping them all before it returns.
func runShared(ctx context.Context, o Options, sys map[string]bool, rep *Reporter) error {
	env, err := StartEnv()
	if err != nil {
		return err
	}
	defer env.Close()

	var pl *Pipeline
	if sys[SystemPipeline] {
		if pl, err = StartPipeline(ctx, PipelineOptions{
			RedisURL: env.RedisURL(PipelineDB), NatsURL: env.NatsURL(), Workers: o.Workers, Log: o.Log,
		}); err != nil {
			return err
		}
		defer func() { _ = pl.Close() }()
	}
	var peers []*peer
	if sys[SystemAsynq] {
		aq, err := StartAsynq(AsynqOptions{RedisAddr: env.RedisAddr(), DB: AsynqDB, Concurrency: o.Workers})
		if err != nil {
			return err
		}
		defer aq.Close()
		peers = append(peers, &peer{name: SystemAsynq, suffix: "_asynq", sys: aq})
	}
	if sys[SystemBullMQ] {
		bq, err := StartBullMQ(ctx, BullMQOptions{
			RedisURL: env.RedisURL(BullMQDB), Concurrency: o.Workers, Dir: o.BullMQDir, Progress: o.Progress,
		})
		if err != nil {
			return err
		}
		defer bq.Close()
		peers = append(peers, &peer{name: SystemBullMQ, suffix: "_bullmq", sys: bq})
	}

	// Throughput.
	var tp float64
	if pl != nil {
		o.Progress(fmt.Sprintf("pipeline: throughput, %d jobs over %d groups", o.Jobs, o.Groups))
		runs0 := pl.Runs()
		var stopLog func() (ScriptTimes, error)
		if o.ScriptLog {
			if stopLog, err = env.startScriptLog(ctx, 64*o.Jobs); err != nil {
				return err
			}
		}
		stopProfile, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return err
		}
		r, st, err := measure(ctx, env, thisProcessCPU, true, func() (ThroughputResult, error) { return pl.Throughput(ctx, o.Jobs, o.Groups) })
		if perr := stopProfile(); perr != nil && err == nil {
			err = perr
		}
		if err != nil {
			return fmt.Errorf("pipeline throughput: %w", err)
		}
		if stopLog != nil {
			times, err := stopLog()
			if err != nil {
				return err
			}
			o.Progress("pipeline: redis scripts per job: " + times.perJob(o.Jobs))
		}
		tp = r.JobsPerSec()
		rep.Add(FigThroughput, tp)
		rep.Add("submit_jobs_per_s", r.SubmitJobsPerSec())
		rep.Add("processor_runs_per_job", float64(pl.Runs()-runs0)/float64(o.Jobs))
		addCost(rep, "", st, o.Jobs)
		o.Progress("pipeline: redis commands per job: " + commandsPerJob(st.redis, o.Jobs))
		d := pl.LastDepths()
		rep.Add("depth_submit_mean", d.Submit)
		rep.Add("depth_ready_mean", d.Ready)
		rep.Add("depth_ready_below_workers_share", d.ReadyBelowWorkersShare)
		rep.Add("depth_result_mean", d.Result)
		rep.Add("depth_inflight_mean", d.Inflight)
	}
	for _, p := range peers {
		o.Progress(fmt.Sprintf("%s: throughput, %d jobs", p.name, o.Jobs))
		r, st, err := measure(ctx, env, p.sys.CPU, p.name != SystemBullMQ, func() (ThroughputResult, error) { return p.sys.Throughput(ctx, o.Jobs) })
		if err != nil {
			return fmt.Errorf("%s throughput: %w", p.name, err)
		}
		p.tp = r.JobsPerSec()
		rep.Add(FigThroughput+p.suffix, p.tp)
		rep.Add("submit_jobs_per_s"+p.suffix, r.SubmitJobsPerSec())
		addCost(rep, p.suffix, st, o.Jobs)
		o.Progress(p.name + ": redis commands per job: " + commandsPerJob(st.redis, o.Jobs))
		if pl != nil {
			addRatio(rep, "throughput_ratio_vs_"+p.name, FigThroughput, p.suffix)
			addRatio(rep, "cpu_per_job_ratio_vs_"+p.name, FigCPU, p.suffix)
		}
	}

	// What the three stored hops alone allow, and what that leaves.
	if pl != nil {
		o.Progress(fmt.Sprintf("floor: %d jobs through three stored JetStream hops alone", o.Jobs))
		f, err := NatsFloor(ctx, env.NatsURL(), o.Jobs)
		if err != nil {
			return err
		}
		natsUs := float64(f.CPUPerJob()) / float64(time.Microsecond)
		rep.Add(FigFloorNats, f.JobsPerSec())
		rep.Add("floor_nats_cpu_us_per_job", natsUs)
		redisUs, _ := rep.Get("redis_cpu_ms_per_1k_jobs") // ms per 1,000 jobs = µs per job
		ceiling := float64(runtime.NumCPU()) * 1e6 / (natsUs + redisUs)
		rep.Add(FigCeiling, ceiling)
		for _, p := range peers {
			rep.Add("floor_nats_ratio_vs_"+p.name, f.JobsPerSec()/p.tp)
			rep.Add("ceiling_ratio_vs_"+p.name, ceiling/p.tp)
		}
	}

	// Head-of-line delay.
	if pl != nil {
		o.Progress(fmt.Sprintf("pipeline: head-of-line, %d queued then %d", o.Backlog, o.Small))
		h, err := pl.HeadOfLine(ctx, o.Backlog, o.Small)
		if err != nil {
			return fmt.Errorf("pipeline head-of-line: %w", err)
		}
		rep.Add(FigHoL, Ms(h.Delay))
		rep.Add("hol_backlog_done_first", float64(h.BacklogDoneFirst))
	}
	for _, p := range peers {
		o.Progress(fmt.Sprintf("%s: head-of-line, %d queued then %d", p.name, o.Backlog, o.Small))
		h, err := p.sys.HeadOfLine(ctx, o.Backlog, o.Small)
		if err != nil {
			return fmt.Errorf("%s head-of-line: %w", p.name, err)
		}
		rep.Add(FigHoL+p.suffix, Ms(h.Delay))
		rep.Add("hol_backlog_done_first"+p.suffix, float64(h.BacklogDoneFirst))
		if pl != nil {
			addRatio(rep, "hol_ratio_vs_"+p.name, FigHoL, p.suffix)
		}
	}

	// Latency at a fraction of the measured throughput.
	if pl != nil {
		rate := o.Load * tp
		if o.Rate > 0 {
			rate = o.Rate
		}
		o.Progress(fmt.Sprintf("pipeline: latency at %.0f jobs/s for %s", rate, o.LatencyDuration))
		l, err := pl.Latency(ctx, rate, o.LatencyDuration, o.Warmup, o.Groups)
		if err != nil {
			return fmt.Errorf("pipeline latency: %w", err)
		}
		if len(l.Total) == 0 {
			return errors.New("pipeline latency: no job after the warm-up")
		}
		rep.Add("latency_rate_jobs_per_s", float64(l.Sent)/l.Duration.Seconds())
		rep.Add(FigLatencyP50, Ms(Percentile(l.Total, 50)))
		rep.Add(FigLatencyP99, Ms(Percentile(l.Total, 99)))
		addStart(rep, "", l)
		rep.Add("latency_submit_to_enqueue_p50_ms", Ms(Percentile(l.SubmitToEnqueue, 50)))
		rep.Add("latency_submit_to_enqueue_p99_ms", Ms(Percentile(l.SubmitToEnqueue, 99)))
		rep.Add("latency_enqueue_to_record_p50_ms", Ms(Percentile(l.EnqueueToRecord, 50)))
		rep.Add("latency_enqueue_to_record_p99_ms", Ms(Percentile(l.EnqueueToRecord, 99)))
	}
	for _, p := range peers {
		rate := o.Load * p.tp
		o.Progress(fmt.Sprintf("%s: latency at %.0f jobs/s for %s", p.name, rate, o.LatencyDuration))
		l, err := p.sys.Latency(ctx, rate, o.LatencyDuration, o.Warmup)
		if err != nil {
			return fmt.Errorf("%s latency: %w", p.name, err)
		}
		if len(l.Total) == 0 {
			return fmt.Errorf("%s latency: no job after the warm-up", p.name)
		}
		rep.Add("latency_rate_jobs_per_s"+p.suffix, float64(l.Sent)/l.Duration.Seconds())
		rep.Add(FigLatencyP50+p.suffix, Ms(Percentile(l.Total, 50)))
		rep.Add(FigLatencyP99+p.suffix, Ms(Percentile(l.Total, 99)))
		if pl == nil {
			continue
		}
		addRatio(rep, "latency_p50_ratio_vs_"+p.name, FigLatencyP50, p.suffix)
		addRatio(rep, "latency_p99_ratio_vs_"+p.name, FigLatencyP99, p.suffix)
	}
	return nil
}

// addStart adds the pipeline's submit-to-processor-start percentiles of l,
// the figures named with suffix.
func addStart(rep *Reporter, suffix string, l LatencyResult) {
	if len(l.ToStart) == 0 {
		return
	}
	rep.Add(FigLatencyStartP50+suffix, Ms(Percentile(l.ToStart, 50)))
	rep.Add(FigLatencyStartP99+suffix, Ms(Percentile(l.ToStart, 99)))
}

// addRatio adds name: the pipeline's figure fig divided by the peer's
// (fig+suffix).
func addRatio(rep *Reporter, name, fig, suffix string) {
	ours, ok1 := rep.Get(fig)
	theirs, ok2 := rep.Get(fig + suffix)
	if ok1 && ok2 {
		rep.Add(name, ours/theirs)
	}
}

// thisProcessCPU is [processCPU] in the shape of peer's CPU: the pipeline
// and asynq run in this process.
func thisProcessCPU(context.Context) (time.Duration, error) { return processCPU(), nil }

// cost is what a run used: the redis-server's counters and the CPU time of
// the process the system under test runs in (this one for the pipeline and
// asynq, Node.js for BullMQ).
type cost struct {
	redis RedisStats
	cpu   time.Duration
	// allocs and allocBytes are the Go heap allocations of this process
	// during the run (the pipeline, its embedded NATS server and the
	// benchmark's own producer; asynq and its producer); inProcess says
	// the system ran here, so they are its.
	allocs, allocBytes uint64
	inProcess          bool
}

// measure runs f and returns what it used; cpu reads the CPU time of the
// system's process; inProcess says the system runs in this one.
func measure(ctx context.Context, env *Env, cpu func(context.Context) (time.Duration, error), inProcess bool, f func() (ThroughputResult, error)) (ThroughputResult, cost, error) {
	s0, err := env.RedisStats(ctx)
	if err != nil {
		return ThroughputResult{}, cost{}, err
	}
	c0, err := cpu(ctx)
	if err != nil {
		return ThroughputResult{}, cost{}, err
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r, err := f()
	if err != nil {
		return r, cost{}, err
	}
	runtime.ReadMemStats(&m1)
	c1, err := cpu(ctx)
	if err != nil {
		return r, cost{}, err
	}
	c := cost{cpu: c1 - c0, allocs: m1.Mallocs - m0.Mallocs, allocBytes: m1.TotalAlloc - m0.TotalAlloc,
		inProcess: inProcess}
	s1, err := env.RedisStats(ctx)
	c.redis = s1.Sub(s0)
	return r, c, err
}

// commandsPerJob describes the Redis commands of a run, the dearest
// first: calls per job and, in brackets, µs per job (a script's time
// includes its commands').
func commandsPerJob(st RedisStats, jobs int) string {
	type kv struct {
		cmd     string
		n, usec int64
	}
	var l []kv
	for k, v := range st.ByCommand {
		l = append(l, kv{k, v, st.UsecByCommand[k]})
	}
	slices.SortFunc(l, func(a, b kv) int { return cmp.Or(cmp.Compare(b.usec, a.usec), cmp.Compare(b.n, a.n)) })
	var sb strings.Builder
	for i, e := range l {
		if i == 16 {
			break
		}
		fmt.Fprintf(&sb, " %s=%.2f(%.1fµs)", e.cmd, float64(e.n)/float64(jobs), float64(e.usec)/float64(jobs))
	}
	return strings.TrimSpace(sb.String())
}

func addCost(rep *Reporter, suffix string, c cost, jobs int) {
	k := float64(jobs) / 1000
	rep.Add("redis_calls_per_job"+suffix, float64(c.redis.Calls)/float64(jobs))
	rep.Add("redis_scripts_per_job"+suffix, float64(c.redis.Scripts)/float64(jobs))
	rep.Add("redis_cpu_ms_per_1k_jobs"+suffix, c.redis.CPUSecs*1000/k)
	rep.Add("process_cpu_ms_per_1k_jobs"+suffix, Ms(c.cpu)/k)
	rep.Add(FigCPU+suffix, (c.redis.CPUSecs*1e6+float64(c.cpu/time.Microsecond))/float64(jobs))
	if c.inProcess {
		rep.Add("go_allocs_per_job"+suffix, float64(c.allocs)/float64(jobs))
		rep.Add("go_alloc_bytes_per_job"+suffix, float64(c.allocBytes)/float64(jobs))
	}
}

// startCPUProfile starts a CPU profile into path ("" means none) and
// returns what stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := writeAllocs(path + ".allocs0"); err != nil {
		pprof.StopCPUProfile()
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return err
		}
		return writeAllocs(path + ".allocs")
	}, nil
}

// writeAllocs writes the process's allocation profile (every allocation
// since it started, sampled) to path; the profile at a phase's end with
// the one at its start as base ("go tool pprof -base") gives the phase's.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: allocation profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: allocation profile: %w", err)
	}
	return f.Close()
}
