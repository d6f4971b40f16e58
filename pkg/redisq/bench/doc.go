// Package bench measures pkg/redisq against a redis-server of its own: the
// fair queue's throughput, latency and memory per job (make bench-redisq),
// and the admission load test for both admission modes (make bench-admission).
//
// The package holds only benchmarks and their helpers. Each benchmark starts
// a private redis-server and stops it at the end, so the server's INFO
// commandstats and used_memory describe that benchmark alone.
//
// With -figures (set by make bench-redisq) every workload has a fixed size
// and each figure is printed as one JSON line on stdout:
//
//	{"bench":"redisq","name":"dequeue_p99_ms_10k_groups","value":0.21}
//
// BenchmarkRedisqMemoryBreakdown also prints, for one group of 100,000
// queued jobs and again once they have left its list, one line per kind of
// key ("name":"memory_breakdown" with phase, kind, keys, bytes by MEMORY
// USAGE, bytes_per_job and encoding), to tell where the bytes of a job go;
// -breakdown.jobs sets the group's size (-breakdown.jobs 1000000 for a
// million-job group).
//
// Without it the workloads scale with b.N like any Go benchmark and only the
// ordinary benchmark metrics are reported. BenchmarkAdmission runs only with
// -admission (set by make bench-admission) and prints one JSON line per
// admission mode and scenario (the tenant scenario T1 prints the tenant
// fairness figures tenant_share_jain and tenant_weight_ratio);
// -admission.cap bounds one scenario's run (default 150s), -admission.record
// also seals the groups and records every done job, and -admission.alpha
// sets the fair score's ALPHA (default 0, the service default).
// Timing goals are reported, never asserted.
package bench
