package bench

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"
)

var (
	flagQueuedJobs    = flag.Int("queued.jobs", 1_000_000, "queued memory: jobs of the backlog")
	flagQueuedPayload = flag.Int("queued.payload", 100, "queued memory: bytes of each job's JSON payload (at least 8)")
)

// BenchmarkQueuedMemory is what a backlog costs in Redis: one bulk action
// of -queued.jobs jobs (1,000,000) with -queued.payload-byte payloads (100)
// queued through pkg/redisq into one group, and the same jobs added to a
// BullMQ queue while no Worker runs, each on a redis-server of its own.
// Figures (JSON lines, as BenchmarkE2E's): queued_bytes_per_job and
// queued_bytes_per_job_bullmq, the growth of used_memory per job, payload
// included, and queued_memory_ratio_vs_bullmq (below 1 is better for the
// pipeline). make bench-redisq runs it after the redisq benchmarks.
func BenchmarkQueuedMemory(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rep := &Reporter{W: os.Stdout}
	n, size := *flagQueuedJobs, *flagQueuedPayload
	for b.Loop() {
		rep.Add("queued_jobs", float64(n))
		rep.Add("queued_payload_bytes", float64(size))
		pl := onFreshEnv(b, func(env *Env) (QueuedResult, error) { return QueuedPipeline(ctx, env, n, size) })
		b.Logf("pipeline: %d queued jobs of %d bytes: +%.1f MB, %.1f bytes per job", n, size, float64(pl.Bytes)/1e6, pl.PerJob())
		rep.Add("queued_bytes_per_job", pl.PerJob())
		bq := onFreshEnv(b, func(env *Env) (QueuedResult, error) {
			peer, err := StartBullMQ(ctx, BullMQOptions{RedisURL: env.RedisURL(BullMQDB), Progress: func(s string) { b.Log(s) }})
			if err != nil {
				return QueuedResult{}, err
			}
			defer peer.Close()
			return peer.Queued(ctx, env, n, size)
		})
		b.Logf("bullmq: %d queued jobs of %d bytes: +%.1f MB, %.1f bytes per job", n, size, float64(bq.Bytes)/1e6, bq.PerJob())
		rep.Add("queued_bytes_per_job_bullmq", bq.PerJob())
		rep.Add("queued_memory_ratio_vs_bullmq", pl.PerJob()/bq.PerJob())
	}
	for _, f := range []struct{ fig, unit string }{
		{"queued_bytes_per_job", "bytes/job"}, {"queued_bytes_per_job_bullmq", "bullmq-bytes/job"}, {"queued_memory_ratio_vs_bullmq", "x-bullmq"},
	} {
		if v, ok := rep.Get(f.fig); ok {
			b.ReportMetric(v, f.unit)
		}
	}
}

// onFreshEnv runs f on servers of its own, stopped afterwards.
func onFreshEnv(b *testing.B, f func(*Env) (QueuedResult, error)) QueuedResult {
	b.Helper()
	env, err := StartEnv()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	r, err := f(env)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
