// Package bench measures the whole bulkaction pipeline end to end, and the
// same workloads through two peers: asynq (github.com/hibiken/asynq), in
// this process, and BullMQ (https://docs.bullmq.io), in a Node.js process
// (bullmq/peer.mjs), all on one private redis-server (a database each:
// [PipelineDB], [AsynqDB], [BullMQDB]) and one embedded NATS server with
// file storage; only the million run (below) gives each system servers of
// its own.
//
// It is a module of its own so that the main module does not depend on
// asynq; BullMQ is installed into bench/bullmq/node_modules (pinned by
// bench/bullmq/package-lock.json) with `npm ci --no-audit --no-fund` the
// first time the benchmark runs, so the BullMQ peer needs Node.js 20+ and
// npm on PATH (-e2e.only pipeline,asynq leaves it out). `make bench-e2e`
// runs BenchmarkE2E, which prints one JSON line per figure on stdout:
//
//	{"bench":"e2e","name":"throughput_jobs_per_s","value":12345.6}
//
// A peer's figures carry its suffix (_asynq, _bullmq); a ratio divides the
// pipeline's figure by the peer's (ours / theirs): for throughput above 1
// is better for the pipeline, for delays, latencies and CPU below 1. The
// -e2e.only flag names the systems to measure, comma-separated (pipeline,
// asynq, bullmq; default all); the ratios need the pipeline and the peer.
// -e2e.rate sets the pipeline's half-load latency run's rate in jobs/s
// instead of the fraction -e2e.load of its throughput, to compare two
// builds at the same offered load.
//
// The figures, and what exactly each one measures:
//
//   - throughput_jobs_per_s: jobs of the "noop" type spread over groups,
//     divided by the time from the first Submit until the last group's
//     COMPLETED event has been received (every job recorded by the
//     aggregator). throughput_jobs_per_s_asynq: the same number of asynq
//     tasks, from the first EnqueueContext until the handler has run for the
//     last one. throughput_jobs_per_s_bullmq: the same number of BullMQ
//     jobs added with Queue.addBulk (1000 per call) while one Worker runs,
//     until the processor has run for the last one.
//     throughput_ratio_vs_asynq and throughput_ratio_vs_bullmq divide the
//     pipeline's by the peer's.
//   - hol_small_group_ms: head-of-line delay. A large group is submitted while
//     the workers are held (so its whole backlog is queued), then the workers
//     are released and a small group is submitted; the figure is the time
//     from that moment until the small group is COMPLETED.
//     hol_small_group_ms_asynq: the same with the large and the small batch
//     in one asynq queue, until the handler has run for the small batch's
//     last task. hol_small_group_ms_bullmq: BullMQ's open source edition has
//     no groups, so the backlog is added while no Worker runs, then the
//     Worker starts and the small tenant's jobs are added to the same queue;
//     until the processor has run for the last of them.
//     hol_backlog_done_first (_asynq, _bullmq) counts the large group's jobs
//     that finished before the small group did. hol_ratio_vs_asynq and
//     hol_ratio_vs_bullmq divide the pipeline's delay by the peer's.
//   - latency_p50_ms, latency_p99_ms: per-job submit-to-record latency at a
//     paced submit rate of a fraction (default one half) of the measured
//     throughput. Each payload carries the client's submit time; after the
//     run the job hashes give the enqueue time (createdAt, when the fetcher
//     stored the job) and the record time (finishedAt, when the aggregator
//     counted its result), both Redis TIME. latency = finishedAt - submit;
//     latency_submit_to_enqueue_p50_ms and latency_enqueue_to_record_p50_ms
//     (and p99) split it. latency_p50_ms_asynq / latency_p99_ms_asynq: enqueue
//     call to handler start, at the same fraction of asynq's throughput;
//     latency_p50_ms_bullmq / latency_p99_ms_bullmq: addBulk call (every
//     5 ms, the jobs due) to processor start, at the same fraction of
//     BullMQ's throughput (both measured by the peer's own clock, which the
//     job's payload carries). latency_p50_ratio_vs_* and
//     latency_p99_ratio_vs_* divide the pipeline's by the peer's; the
//     pipeline's latency runs until the result is recorded, the peers' only
//     until the processor starts. Jobs submitted in the first second are
//     left out as warm-up. Like for like, the pipeline's processor also
//     times each job from submit to its start: latency_start_p50_ms and
//     latency_start_p99_ms.
//   - Latency at the same offered rate. Since each system above runs at a
//     fraction of its own throughput, after the shared phase each peer runs
//     its latency run again alone on fresh servers (at the same fraction of
//     the throughput it showed): latency_same_rate_jobs_per_s_asynq,
//     latency_same_rate_p50_ms_asynq, latency_same_rate_p99_ms_asynq (and
//     _bullmq); then the pipeline, alone on fresh servers too, at the rate
//     that peer was offered: latency_rate_jobs_per_s_at_rate_asynq,
//     latency_p50_ms_at_rate_asynq,
//     latency_p99_ms_at_rate_asynq, latency_start_p50_ms_at_rate_asynq,
//     latency_start_p99_ms_at_rate_asynq (and _bullmq).
//     latency_p99_same_rate_ratio_vs_* divides the pipeline's p99 to the
//     result recorded by the peer's, latency_start_p99_same_rate_ratio_vs_*
//     the pipeline's p99 to the processor's start, where the peer's ends.
//   - Costs of the throughput runs (suffix _asynq, _bullmq for the peers):
//     redis_calls_per_job (commands, those run by scripts included),
//     redis_scripts_per_job (EVALSHA calls), redis_cpu_ms_per_1k_jobs (INFO
//     cpu of the redis-server), process_cpu_ms_per_1k_jobs (the CPU time of
//     the system's process: for the pipeline this one's, with the services,
//     the embedded NATS server and the producer; for asynq this one's, with
//     its client and server; for BullMQ the Node.js process's, with its
//     Queue and Worker, from process.cpuUsage) and cpu_us_per_job (process
//     plus redis-server); for the systems that run in this process (the
//     pipeline, asynq) go_allocs_per_job and go_alloc_bytes_per_job, the Go
//     heap allocations of the process per job (runtime.MemStats Mallocs and
//     TotalAlloc), the embedded NATS server and the producer included.
//     cpu_per_job_ratio_vs_asynq and
//     cpu_per_job_ratio_vs_bullmq divide the pipeline's cpu_us_per_job by
//     the peer's. On a shared host these say more than the rates, which
//     depend on the CPU other processes leave.
//   - Where the pipeline's jobs waited during its throughput run, averaged
//     over samples every 50 ms: depth_submit_mean, depth_ready_mean,
//     depth_result_mean (messages held by the stream), depth_inflight_mean
//     (admitted, not yet confirmed on READY) and
//     depth_ready_below_workers_share (share of samples in which READY held
//     fewer messages than there are workers: the workers were starved).
//   - floor_nats_jobs_per_s and floor_nats_cpu_us_per_job: [NatsFloor], the
//     three stored JetStream hops of a job (SUBMIT, READY, RESULT, configured
//     as the pipeline's) relayed alone in batches of 256, one message per
//     job, with no Redis and no service logic: the most a design with one
//     message per job on those hops can carry on this machine (READY packs
//     and RESULT batches carry several jobs per message, so the pipeline
//     can go past it). ceiling_jobs_per_s: the cores of the machine divided by
//     floor_nats_cpu_us_per_job plus the pipeline's Redis CPU per job
//     (redis_cpu_ms_per_1k_jobs), that is the throughput if every core did
//     nothing but that NATS and Redis work. floor_nats_ratio_vs_asynq,
//     ceiling_ratio_vs_asynq (and _vs_bullmq) divide them by the peer's
//     throughput.
//   - submit_jobs_per_s(_asynq, _bullmq): how fast the producers got their jobs
//     accepted; processor_runs_per_job: processor calls per job in the
//     throughput run (above 1 means redeliveries).
//   - million_seconds, million_jobs_per_s, million_peak_redis_mb,
//     million_peak_redis_bytes_per_job (suffix _asynq, _bullmq for the
//     peers): the million run, -e2e.million jobs (default 1,000,000, and
//     million_jobs says how many; 0 leaves the run out), run once the
//     servers of the other phases are stopped. Each system in turn gets a
//     fresh redis-server (the pipeline also a fresh NATS server), stopped
//     after its run, so no run's memory or leftover work reaches the next.
//     The workload is the throughput run's at that size: the pipeline's
//     jobs over -e2e.groups groups (10), one producer per group submitting
//     1000 jobs per Submit call, then sealing; asynq's enqueued one per
//     EnqueueContext call by [DefaultProducers] goroutines; BullMQ's added
//     with Queue.addBulk (1000 per call) while one Worker runs (peer.mjs's
//     "million" operation). million_seconds runs from the first submit until
//     the last job is done (the last group COMPLETED; the handler or
//     processor run for the last task or job), million_jobs_per_s is the
//     jobs divided by it. The redis-server's INFO memory used_memory is read
//     just before the first submit, every [MemorySampleInterval] (100 ms)
//     during the run and once at its end; million_peak_redis_mb is the
//     highest sample minus the first, in MB (10^6 bytes), and
//     million_peak_redis_bytes_per_job the same in bytes per job. asynq and
//     BullMQ delete a job once it has run (asynq without Retention, BullMQ
//     with removeOnComplete), so their peak is the backlog the producer ran
//     ahead of the workers; the pipeline runs the same way
//     (KEEP_SUCCEEDED_JOBS=false: a succeeded job's hash goes when its
//     result is recorded, its id stays). It then runs once more with its
//     default retention, which keeps every succeeded job's hash for JOB_TTL
//     (24 h), so that peak holds every job of the run: the same figures
//     with the suffix _kept, and million_peak_redis_ratio_vs_bullmq_kept
//     (and _asynq_kept). million_time_ratio_vs_asynq,
//     million_time_ratio_vs_bullmq, million_peak_redis_ratio_vs_asynq and
//     million_peak_redis_ratio_vs_bullmq divide the pipeline's time and peak
//     by the peer's (below 1 is better for the pipeline).
//   - host_load_1m, host_load_1m_end: the host's load average when the run
//     started and ended. Figures from a host busy with other work are not
//     comparable with those of an idle one.
//
// The throughput run also logs the Redis commands per job (calls and µs).
// The -e2e.scripts flag logs the time spent in each redisq script per job
// (it turns on the redis-server's slow log for every command, which slows
// it down: use it to compare scripts, not for the figures). The
// -e2e.cpuprofile flag writes a CPU profile of the pipeline's throughput run
// alone (the services, the embedded NATS server and the producer; not the
// redis-server), e.g. make bench-e2e E2E_FLAGS="-e2e.only pipeline
// -e2e.million 0 -e2e.cpuprofile /tmp/cpu.prof". Its allocations go next to
// it: "go tool pprof -sample_index alloc_objects -base /tmp/cpu.prof.allocs0
// /tmp/cpu.prof.allocs" shows where that phase's allocations per job come from.
//
// Every system runs the same number of concurrent jobs (the pipeline's
// worker count equals asynq's Concurrency and the concurrency of BullMQ's
// one Worker, -e2e.workers) and a processor that does nothing. BullMQ's jobs
// are removed on completion, as asynq and the pipeline keep no finished
// jobs; each BullMQ workload has a queue of its own.
//
// `make bench-gateway` runs BenchmarkGateway and BenchmarkGatewayIsolation.
// BenchmarkGateway measures the gateway's own capacity, one tenant with its
// limits off: a million jobs in one NDJSON POST against the Go SDK
// (gateway_vs_sdk_submit), and the delay of events to 2,000 SSE subscribers.
// BenchmarkGatewayIsolation measures how well one tenant is shielded from
// another at the gateway's default limits: the gateway runs as a process of
// its own (the built binary), a well-behaved tenant submits requests of 500
// jobs at 40 per second for 10 s alone and again while another tenant, from
// a process of its own (internal/gatewayflood), sends 8 endless uploads,
// tries to hold 500 event streams open and reads its failures (200 jobs of
// 200 KiB payloads) and the overview in loops. Figures:
// isolation_throughput_ratio (the well-behaved tenant's accepted jobs per
// second during the flood over alone; goal at least 0.8),
// isolation_p99_ratio (its requests' p99 time to the answer, during over
// alone; goal at most 2), isolation_flood_gateway_peak_rss_mib (the
// gateway's peak resident memory during the flood; goal at most 512), the
// gateway's CPU seconds in each phase, and the flood's requests by answer.
// It also logs, per phase, the p50 and p99 of each stage of the well-behaved
// tenant's requests from their Server-Timing header (door, check, read,
// room, publish, total) and of their time outside the gateway's handler, to
// tell which wait grows during the flood.
// The -iso.* flags change the phases, the pace and the flood.
//
// `make bench-redisq` ends with BenchmarkQueuedMemory: what a backlog costs
// in Redis. One bulk action of 1,000,000 jobs with 100-byte JSON payloads
// (-queued.jobs, -queued.payload) is queued through pkg/redisq into one
// group with no fetcher admitting, and the same jobs are added to a BullMQ
// queue with no Worker running, each on a redis-server of its own:
// queued_bytes_per_job, queued_bytes_per_job_bullmq (the growth of
// used_memory per job, payload included) and queued_memory_ratio_vs_bullmq.
//
// `make bench-cluster` runs BenchmarkCluster: the pipeline on Redis Cluster
// shards (docs/ARCHITECTURE.md §11.1) against one redis-server. Each phase
// gets fresh servers and runs every target in this process with a processor
// (job type cluster-bench) that records when and for which tenant it ran and
// returns. Phase cluster: a Redis Cluster of -cluster.primaries primaries
// (3) and REDIS_SHARDS -cluster.shards (16); phase single: one redis-server,
// REDIS_SHARDS 1. Both run GLOBAL_RPS -cluster.limit (3000) with
// -cluster.tenants tenants (60) of equal weight, each with one sealed group
// of 2 × limit × (span + 2 s) / tenants jobs, submitted a batch per tenant
// in turn, so demand exceeds the limit from the first submit to the span's
// end. Once every job is queued, 2 s are left out, then the span of
// -cluster.seconds (15) is measured; then every group must complete with
// exact counts (jobs, done and succeeded equal to its size, nothing failed
// or cancelled) and every job must have run: a job lost or counted twice
// fails the bench (jobs_run_twice counts redeliveries, which at-least-once
// allows). Each phase prints one JSON line of its figures
// ({"bench":"cluster","phase":"cluster",...}) and the bench a summary line
// (phase "summary": the cluster phase's goal figures,
// cpu_us_per_job_single, cpu_per_job_ratio_vs_single and the load
// averages). Goals are reported, not asserted:
//
//   - busiest_primary_share: the busiest primary's share of the commands the
//     primaries ran in the span (INFO commandstats calls, every command but
//     INFO: those scripts run and the EVALSHA calls; goal at most 0.40);
//     busiest_primary_cpu_share the same of their CPU, primary_commands and
//     primary_cpu_ms per primary, primary_shards and primary_tenants the
//     shards and tenants whose slots each primary serves, global_primary the
//     one serving the cross-shard keys ({g}).
//   - global_max_window_ratio: the most jobs admitted in an aligned 1 s
//     window (whole seconds of the clock) within the span, over the limit
//     (goal at most 1.0), from the shards' own counts of each window (the
//     counters admission increments in the script that leases the jobs,
//     by Redis's clock, summed over the shards: exact).
//     global_max_sliding_window_ratio is the same over any 1 s window
//     starting every 1 ms (goal at most 1.02), from every admission call's
//     jobs at the Redis time its script ran (redisq.AdmitObserver: exact
//     to the ms). The _sampled figures take the admission times from the
//     fetcher's admission counter (bulk_action_backpressure_admitted_total,
//     ready and non_ready) read every 1 ms instead: a job counts when its
//     call has returned, up to a round's length late. The _starts figures
//     count processor starts. admitted_per_s holds every aligned second's
//     admissions (sampled) and global_min_window_ratio the least over the
//     limit, to tell a stall from a steady shortfall.
//   - tenant_share_jain: Jain's index of the tenants' processor starts in
//     each 2 s window of the span, the least (goal at least 0.99);
//     tenant_share_jain_span over the whole span, tenant_min_share and
//     tenant_max_share the least and most tenant's starts over the even
//     share. tenants_dry counts tenants with no job queued at the span's end
//     (should be 0: the figures are not at full demand otherwise).
//   - utilisation: jobs admitted in the span (jobs) over limit × span
//     (goal at least 0.97); utilisation_starts with processor starts
//     (jobs_started).
//   - cpu_us_per_job: CPU of this process (the services, the embedded NATS
//     server, the idle producer) plus every redis-server of the phase
//     (/proc/<pid>/stat) in the span, over the jobs started in it
//     (process_cpu_us_per_job and redis_cpu_us_per_job split it);
//     cpu_per_job_ratio_vs_single divides the cluster's by the single
//     server's. admit_calls counts the admission scripts that leased jobs
//     in the span (a fetcher's round runs one per shard with jobs due),
//     jobs_per_admit_call the jobs of each. -cluster.phases runs one phase
//     alone.
package bench
