package bench

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"testing"
	"time"
)

var (
	flagJobs    = flag.Int("e2e.jobs", 100_000, "throughput run: jobs")
	flagGroups  = flag.Int("e2e.groups", 10, "throughput, latency and million runs: groups")
	flagWorkers = flag.Int("e2e.workers", DefaultWorkers, "pipeline WorkerCount and asynq Concurrency")
	flagBacklog = flag.Int("e2e.backlog", 50_000, "head-of-line run: jobs of the large group")
	flagSmall   = flag.Int("e2e.small", 100, "head-of-line run: jobs of the small group")
	flagLatency = flag.Duration("e2e.latency", 10*time.Second, "latency run: how long to submit")
	flagMillion = flag.Int("e2e.million", DefaultMillion, "million run: jobs through each system on servers of its own, with peak Redis memory (0 skips it)")
	flagLoad    = flag.Float64("e2e.load", 0.5, "latency run: submit rate as a fraction of the measured throughput")
	flagRate    = flag.Float64("e2e.rate", 0, "pipeline's latency run: submit rate in jobs/s instead of -e2e.load's (0 = use -e2e.load)")
	flagOnly    = flag.String("e2e.only", "", "measure only these systems, comma-separated: pipeline, asynq, bullmq (default all)")
	flagLogs    = flag.Bool("e2e.logs", false, "print the services' warnings and errors on stderr")
	flagProfile = flag.String("e2e.cpuprofile", "", "write a CPU profile of the pipeline's throughput run (that phase only) to this file")
	flagScripts = flag.Bool("e2e.scripts", false, "diagnostic: time every redisq script of the pipeline's throughput run (slows Redis down)")
)

// BenchmarkE2E prints the figures of package bench as JSON lines (run it
// once: -benchtime 1x). Goals are reported, not asserted.
func BenchmarkE2E(b *testing.B) {
	o := Options{
		Jobs: *flagJobs, Groups: *flagGroups, Workers: *flagWorkers, Backlog: *flagBacklog, Small: *flagSmall,
		Million: *flagMillion, LatencyDuration: *flagLatency, Load: *flagLoad, Rate: *flagRate, Only: *flagOnly, ScriptLog: *flagScripts, CPUProfile: *flagProfile,
		Progress: func(s string) { b.Log(s) },
	}
	if *flagLogs {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// The million run takes about as long as the rest together, or longer
	// (make bench-e2e gives go test -timeout 45m).
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	rep := &Reporter{W: os.Stdout}
	for b.Loop() {
		if err := Run(ctx, o, rep); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []struct{ fig, unit string }{
		{FigThroughput, "jobs/s"}, {FigThroughputAsynq, "asynq-jobs/s"}, {FigThroughputRatio, "x-asynq"},
		{FigThroughputBullMQ, "bullmq-jobs/s"}, {FigThroughputRatioBullMQ, "x-bullmq"},
		{FigHoL, "hol-ms"}, {FigHoLAsynq, "asynq-hol-ms"}, {FigHoLBullMQ, "bullmq-hol-ms"},
		{FigLatencyP50, "p50-ms"}, {FigLatencyP99, "p99-ms"},
		{FigMillion, "million-s"}, {FigMillionPeakRedis, "million-redis-MB"},
	} {
		if v, ok := rep.Get(f.fig); ok {
			b.ReportMetric(v, f.unit)
		}
	}
	if v, ok := rep.Get(FigThroughputRatio); ok && v < 2 {
		b.Logf("goal missed: throughput %.2fx asynq, goal >= 2x", v)
	}
	if v, ok := rep.Get(FigHoL); ok && v > 100 {
		b.Logf("goal missed: head-of-line %.1f ms, goal <= 100 ms", v)
	}
}
