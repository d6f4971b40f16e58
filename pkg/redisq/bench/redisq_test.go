package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// Sizes of the -figures run, chosen so make bench-redisq takes one to two
// minutes on two cores.
const (
	benchGroups   = 100     // groups sharing the queue in the throughput runs
	singleJobs    = 60_000  // jobs enqueued and dequeued one call each
	batchJobs     = 400_000 // jobs enqueued and dequeued 100 per call
	rawPairs      = 4_000_000
	latencyGroups = 10_000 // non-empty groups during the latency run
	latencyCalls  = 30_000 // timed single dequeues
	memoryJobs    = 100_000
	batchSize     = 100 // jobs per EnqueueBatch / take, pairs per raw pipeline
	serviceAlpha  = 0   // the service default (BULKACTION_ALPHA)
	listpackLimit = "128"
	queuedHashEnc = "hashtable" // a group's 1,000 queued records of 100-byte payloads
)

// BenchmarkRedisqThroughput measures jobs/s through the fair queue, one job
// per call and 100 per call, against the raw ceiling of pipelined RPUSH+LPOP
// pairs and the floors of a fair queue that keeps no state (floor_test.go),
// and the Redis commands each job costs. Each sub-benchmark runs on a
// redis-server of its own; one goroutine issues every call.
func BenchmarkRedisqThroughput(b *testing.B) {
	var batchCycle, floorCycle, listedCycle, raw float64
	b.Run("single", benchSingle)
	b.Run("batch100", func(b *testing.B) { batchCycle = benchBatch(b) })
	b.Run("batch100-mixed-groups", benchBatchMixed)
	b.Run("take250-10-groups", benchTakePipelineShape)
	b.Run("floor-batch100", func(b *testing.B) { floorCycle = benchFloorCycle(b, floorIDs) })
	b.Run("floor-records-in-list-batch100", func(b *testing.B) { listedCycle = benchFloorCycle(b, floorListed) })
	b.Run("raw-rpush-lpop", func(b *testing.B) { raw = benchRaw(b) })
	if batchCycle > 0 && raw > 0 {
		figure("batch_cycle_ratio_to_raw", batchCycle/raw)
	}
	if floorCycle > 0 && raw > 0 {
		figure("floor_batch_cycle_ratio_to_raw", floorCycle/raw)
	}
	if listedCycle > 0 && raw > 0 {
		figure("floor_records_in_list_batch_cycle_ratio_to_raw", listedCycle/raw)
	}
}

// benchSingle enqueues n jobs with Queue.Enqueue, then takes them one at a
// time (take: Admit and Confirm).
func benchSingle(b *testing.B) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	ctx := context.Background()
	n := size(b, singleJobs)
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = job(i%benchGroups, i)
	}

	st0 := s.commandStats(b)
	b.StartTimer()
	start := time.Now()
	for _, j := range jobs {
		out, err := q.Enqueue(ctx, j)
		if err != nil {
			b.Fatal(err)
		}
		if out != redisq.Added {
			b.Fatalf("job %s: %v", j.ID, out)
		}
	}
	enq := time.Since(start)
	b.StopTimer()
	st1 := s.commandStats(b)
	b.StartTimer()
	start = time.Now()
	for i := 0; i < n; i++ {
		if js, err := take(ctx, q, 1); err != nil || len(js) != 1 {
			b.Fatalf("dequeue %d of %d: %d jobs, %v", i, n, len(js), err)
		}
	}
	deq := time.Since(start)
	b.StopTimer()
	st2 := s.commandStats(b)
	if js, err := take(ctx, q, 1); err != nil || len(js) != 0 {
		b.Fatalf("dequeue after %d jobs: %d jobs, %v, want none", n, len(js), err)
	}

	b.ReportMetric(figure("enqueue_jobs_per_s", float64(n)/enq.Seconds()), "enq-jobs/s")
	b.ReportMetric(figure("dequeue_jobs_per_s", float64(n)/deq.Seconds()), "deq-jobs/s")
	b.ReportMetric(figure("redis_calls_per_job_enqueue", float64(callsBetween(st0, st1, scriptSkips...))/float64(n)), "enq-calls/job")
	b.ReportMetric(figure("redis_calls_per_job_dequeue", float64(callsBetween(st1, st2, scriptSkips...))/float64(n)), "deq-calls/job")
}

// benchBatch enqueues n jobs with EnqueueBatch, 100 jobs of one group per
// call (a producer submits a group's jobs together), then dequeues them with
// take(100) (Admit and Confirm). It returns the jobs/s of the whole cycle.
func benchBatch(b *testing.B) float64 {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	ctx := context.Background()
	n := size(b, batchJobs)
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = job((i/batchSize)%benchGroups, i)
	}

	st0 := s.commandStats(b)
	b.StartTimer()
	start := time.Now()
	for i := 0; i < n; i += batchSize {
		out, err := q.EnqueueBatch(ctx, jobs[i:min(i+batchSize, n)])
		if err != nil {
			b.Fatal(err)
		}
		for k, o := range out {
			if o != redisq.Added {
				b.Fatalf("job %s: %v", jobs[i+k].ID, o)
			}
		}
	}
	enq := time.Since(start)
	b.StopTimer()
	st1 := s.commandStats(b)
	b.StartTimer()
	start = time.Now()
	got := takeAll(b, q, n, batchSize)
	deq := time.Since(start)
	b.StopTimer()
	st2 := s.commandStats(b)
	if got != n {
		b.Fatalf("dequeued %d jobs, enqueued %d", got, n)
	}

	b.ReportMetric(figure("enqueue_batch100_jobs_per_s", float64(n)/enq.Seconds()), "enq-jobs/s")
	b.ReportMetric(figure("dequeue_batch100_jobs_per_s", float64(n)/deq.Seconds()), "deq-jobs/s")
	cycle := float64(n) / (enq + deq).Seconds()
	b.ReportMetric(figure("batch_cycle_jobs_per_s", cycle), "cycle-jobs/s")
	b.ReportMetric(figure("redis_calls_per_job_enqueue_batch100", float64(callsBetween(st0, st1, scriptSkips...))/float64(n)), "enq-calls/job")
	b.ReportMetric(figure("redis_calls_per_job_dequeue_batch100", float64(callsBetween(st1, st2, scriptSkips...))/float64(n)), "deq-calls/job")
	return cycle
}

// benchBatchMixed enqueues 100 jobs per call where every call holds one job
// of each of the 100 groups (one script call per group, pipelined), the
// shape of an ingest batch when producers interleave.
func benchBatchMixed(b *testing.B) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	ctx := context.Background()
	n := size(b, batchJobs/2)
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = job(i%benchGroups, i)
	}
	st0 := s.commandStats(b)
	b.StartTimer()
	start := time.Now()
	for i := 0; i < n; i += batchSize {
		if _, err := q.EnqueueBatch(ctx, jobs[i:min(i+batchSize, n)]); err != nil {
			b.Fatal(err)
		}
	}
	enq := time.Since(start)
	b.StopTimer()
	st1 := s.commandStats(b)
	var queued int64
	for g := 0; g < benchGroups; g++ {
		l, err := q.PendingJobs(ctx, groupRef(g))
		if err != nil {
			b.Fatal(err)
		}
		queued += l
	}
	if queued != int64(n) {
		b.Fatalf("%d jobs queued, enqueued %d", queued, n)
	}
	b.ReportMetric(figure("enqueue_batch100_mixed_groups_jobs_per_s", float64(n)/enq.Seconds()), "enq-jobs/s")
	b.ReportMetric(figure("redis_calls_per_job_enqueue_batch100_mixed_groups", float64(callsBetween(st0, st1, scriptSkips...))/float64(n)), "enq-calls/job")
}

// benchTakePipelineShape takes jobs as the pipeline's fetcher does in
// make bench-e2e's throughput run: 10 groups of one tenant, 250 jobs per
// take (Admit and Confirm), so a call serves each group about 25 times. It
// reports the jobs/s and the redis-server's CPU per job (INFO's
// used_cpu_user + used_cpu_sys), the figure the pipeline's Redis CPU
// follows; the jobs are enqueued beforehand, 1,000 per call.
func benchTakePipelineShape(b *testing.B) {
	const groups, per = 10, 250
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	n := size(b, batchJobs)
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = job((i/1000)%groups, i)
	}
	enqueueAll(b, q, jobs)
	cpu0 := s.cpuSeconds(b)
	b.StartTimer()
	start := time.Now()
	if got := takeAll(b, q, n, per); got != n {
		b.Fatalf("dequeued %d jobs, enqueued %d", got, n)
	}
	d := time.Since(start)
	b.StopTimer()
	cpu := s.cpuSeconds(b) - cpu0
	b.ReportMetric(figure("take250_10_groups_jobs_per_s", float64(n)/d.Seconds()), "jobs/s")
	b.ReportMetric(figure("take250_10_groups_redis_cpu_us_per_job", cpu*1e6/float64(n)), "redis-cpu-µs/job")
}

// cpuSeconds returns the redis-server's CPU time so far (INFO cpu:
// used_cpu_user + used_cpu_sys).
func (s *server) cpuSeconds(b *testing.B) float64 {
	b.Helper()
	info, err := s.rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", name, err)
			}
			sum += f
		}
	}
	return sum
}

// benchRaw is the ceiling: RPUSH+LPOP pairs of a 100-byte value on one list,
// 100 pairs per pipeline, on the same kind of server. It returns pairs/s.
func benchRaw(b *testing.B) float64 {
	b.StopTimer()
	s := startServer(b)
	ctx := context.Background()
	n := size(b, rawPairs)
	const key = "raw:list"
	v := payload(0)
	b.StartTimer()
	start := time.Now()
	for done := 0; done < n; {
		k := min(batchSize, n-done)
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < k; i++ {
				p.RPush(ctx, key, v)
				p.LPop(ctx, key)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	d := time.Since(start)
	b.StopTimer()
	if l, err := s.rdb.LLen(ctx, key).Result(); err != nil || l != 0 {
		b.Fatalf("raw list holds %d (%v) after balanced pairs", l, err)
	}
	pairs := float64(n) / d.Seconds()
	b.ReportMetric(figure("raw_rpush_lpop_pairs_per_s", pairs), "pairs/s")
	return pairs
}

// BenchmarkRedisqDequeueLatency times single take calls (Admit and Confirm
// of one job) while 10,000
// groups hold jobs (every group keeps at least one job to the end).
func BenchmarkRedisqDequeueLatency(b *testing.B) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	ctx := context.Background()
	n := size(b, latencyCalls)
	perGroup := n/latencyGroups + 2
	jobs := make([]redisq.Job, 0, latencyGroups*perGroup)
	for g := 0; g < latencyGroups; g++ {
		for k := 0; k < perGroup; k++ {
			jobs = append(jobs, job(g, g*perGroup+k))
		}
	}
	enqueueAll(b, q, jobs)

	lat := make([]time.Duration, n)
	b.StartTimer()
	for i := range lat {
		t := time.Now()
		if js, err := take(ctx, q, 1); err != nil || len(js) != 1 {
			b.Fatalf("dequeue %d: %d jobs, %v", i, len(js), err)
		}
		lat[i] = time.Since(t)
	}
	b.StopTimer()
	waiting, err := s.rdb.ZCard(ctx, keysOf(q).TenantGroups(benchTenant, contracts.PriorityNormal)).Result()
	if err != nil {
		b.Fatal(err)
	}
	if waiting != latencyGroups {
		b.Fatalf("%d groups waiting after the run, want %d", waiting, latencyGroups)
	}
	sortDurations(lat)
	b.ReportMetric(figure("dequeue_p50_ms_10k_groups", msOf(percentile(lat, 0.50))), "p50-ms")
	b.ReportMetric(figure("dequeue_p99_ms_10k_groups", msOf(percentile(lat, 0.99))), "p99-ms")
	b.ReportMetric(msOf(lat[len(lat)-1]), "max-ms")
}

// BenchmarkRedisqMemory measures Redis memory per job beyond its payload:
// (used_memory after enqueueing 100,000 jobs of 100 bytes over 100 groups -
// used_memory before) / jobs - 100. A queued job is a record in its
// group's queued hash, no hash of its own (pkg/redisq/jobhash.go): with
// 1,000 records of more than 128 bytes a group's hash is a hashtable, so
// the listpack128 run, which raises hash-max-listpack-value to 128, does not
// change the figure.
func BenchmarkRedisqMemory(b *testing.B) {
	for _, c := range []struct {
		name, figure, encoding string
		config                 []string
	}{
		{"default", "bytes_per_job_beyond_payload", queuedHashEnc, nil},
		{"listpack128", "bytes_per_job_beyond_payload_listpack128", queuedHashEnc, []string{"hash-max-listpack-value", listpackLimit}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			s := startServer(b, c.config...)
			q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
			ctx := context.Background()
			n := size(b, memoryJobs)
			jobs := make([]redisq.Job, n)
			for i := range jobs {
				jobs[i] = job((i/batchSize)%benchGroups, i)
			}
			before := s.usedMemory(b)
			b.StartTimer()
			enqueueAll(b, q, jobs)
			b.StopTimer()
			after := s.usedMemory(b)
			enc, err := s.rdb.ObjectEncoding(ctx, keysOf(q).GroupQueued(jobs[0].Group)).Result()
			if err != nil {
				b.Fatal(err)
			}
			if enc != c.encoding {
				b.Fatalf("queued hash encoding %q, want %q", enc, c.encoding)
			}
			b.ReportMetric(figure(c.figure, float64(after-before)/float64(n)-payloadLen), "bytes/job")
		})
	}
}
