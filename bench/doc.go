// Package bench measures the whole bulkaction pipeline end to end, and the
// same workloads through asynq (github.com/hibiken/asynq), in one process on
// one private redis-server and one embedded NATS server with file storage.
//
// It is a module of its own so that the main module does not depend on
// asynq. `make bench-e2e` runs BenchmarkE2E, which prints one JSON line per
// figure on stdout:
//
//	{"bench":"e2e","name":"throughput_jobs_per_s","value":12345.6}
//
// The figures, and what exactly each one measures:
//
//   - throughput_jobs_per_s: jobs of the "noop" type spread over groups,
//     divided by the time from the first Submit until the last group's
//     COMPLETED event has been received (every job recorded by the
//     aggregator). throughput_jobs_per_s_asynq: the same number of asynq
//     tasks, from the first EnqueueContext until the handler has run for the
//     last one. throughput_ratio_vs_asynq is the first divided by the second.
//   - hol_small_group_ms: head-of-line delay. A large group is submitted while
//     the workers are held (so its whole backlog is queued), then the workers
//     are released and a small group is submitted; the figure is the time
//     from that moment until the small group is COMPLETED.
//     hol_small_group_ms_asynq: the same with the large and the small batch
//     in one asynq queue, until the handler has run for the small batch's
//     last task. hol_backlog_done_first(_asynq) counts the large group's jobs
//     that finished before the small group did.
//   - latency_p50_ms, latency_p99_ms: per-job submit-to-record latency at a
//     paced submit rate of a fraction (default one half) of the measured
//     throughput. Each payload carries the client's submit time; after the
//     run the job hashes give the enqueue time (createdAt, when the fetcher
//     stored the job) and the record time (finishedAt, when the aggregator
//     counted its result), both Redis TIME. latency = finishedAt - submit;
//     latency_submit_to_enqueue_p50_ms and latency_enqueue_to_record_p50_ms
//     (and p99) split it. latency_p50_ms_asynq / latency_p99_ms_asynq: enqueue
//     call to handler start, at the same fraction of asynq's throughput.
//     Jobs submitted in the first second are left out as warm-up.
//   - Costs of the throughput runs (suffix _asynq for asynq):
//     redis_calls_per_job (commands, those run by scripts included),
//     redis_scripts_per_job (EVALSHA calls), redis_cpu_ms_per_1k_jobs (INFO
//     cpu of the redis-server) and process_cpu_ms_per_1k_jobs (this
//     process's CPU time: the services, the embedded NATS server and the
//     producer, or asynq's client and server). On a shared host these say
//     more than the rates, which depend on the CPU other processes leave.
//   - Where the pipeline's jobs waited during its throughput run, averaged
//     over samples every 50 ms: depth_submit_mean, depth_ready_mean,
//     depth_result_mean (messages held by the stream), depth_inflight_mean
//     (admitted, not yet confirmed on READY) and
//     depth_ready_below_workers_share (share of samples in which READY held
//     fewer messages than there are workers: the workers were starved).
//   - floor_nats_jobs_per_s and floor_nats_cpu_us_per_job: [NatsFloor], the
//     three stored JetStream hops of a job (SUBMIT, READY, RESULT, configured
//     as the pipeline's) relayed alone in batches of 256, with no Redis and
//     no service logic: the most any design with those hops can carry on
//     this machine. ceiling_jobs_per_s: the cores of the machine divided by
//     floor_nats_cpu_us_per_job plus the pipeline's Redis CPU per job
//     (redis_cpu_ms_per_1k_jobs), that is the throughput if every core did
//     nothing but that NATS and Redis work. floor_nats_ratio_vs_asynq and
//     ceiling_ratio_vs_asynq divide them by asynq's throughput.
//   - submit_jobs_per_s(_asynq): how fast the producers got their jobs
//     accepted; processor_runs_per_job: processor calls per job in the
//     throughput run (above 1 means redeliveries).
//   - host_load_1m, host_load_1m_end: the host's load average when the run
//     started and ended. Figures from a host busy with other work are not
//     comparable with those of an idle one.
//
// The throughput run also logs the Redis commands per job (calls and µs).
// The -e2e.scripts flag logs the time spent in each redisq script per job
// (it turns on the redis-server's slow log for every command, which slows
// it down: use it to compare scripts, not for the figures).
//
// Both systems run the same number of concurrent jobs (the pipeline's worker
// count equals asynq's Concurrency) and a processor that does nothing.
package bench
