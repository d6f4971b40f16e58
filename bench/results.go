package bench

import (
	"slices"
	"time"
)

// Defaults of the benchmark's options.
const (
	// DefaultWorkers is how many jobs each system runs at once when no
	// worker count is given: the pipeline's WorkerCount and asynq's
	// Concurrency.
	DefaultWorkers = 32
	// DefaultProducers is how many goroutines enqueue asynq tasks at once
	// (asynq has no batch enqueue: one call per task).
	DefaultProducers = 32
	// DefaultWarmup is how much of the start of a latency run is left out.
	DefaultWarmup = time.Second
	// DefaultMillion is the million run's size in the benchmark
	// (-e2e.million).
	DefaultMillion = 1_000_000
	// MemorySampleInterval is how often the million run reads its
	// redis-server's used_memory.
	MemorySampleInterval = 100 * time.Millisecond
)

// ThroughputResult is one throughput run.
type ThroughputResult struct {
	// Jobs is how many jobs ran.
	Jobs int
	// Elapsed runs from the first submit until the last job is done.
	Elapsed time.Duration
	// Submitted runs from the first submit until the last one was accepted.
	Submitted time.Duration
}

// JobsPerSec is Jobs / Elapsed (0 when Elapsed is 0).
func (r ThroughputResult) JobsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Jobs) / r.Elapsed.Seconds()
}

// SubmitJobsPerSec is Jobs / Submitted (0 when Submitted is 0).
func (r ThroughputResult) SubmitJobsPerSec() float64 {
	if r.Submitted <= 0 {
		return 0
	}
	return float64(r.Jobs) / r.Submitted.Seconds()
}

// HoLResult is one head-of-line run: a small group submitted behind a large
// backlog.
type HoLResult struct {
	// Backlog is the large group's size and Small the small group's.
	Backlog, Small int
	// Delay runs from the small group's first submit until its last job is
	// done.
	Delay time.Duration
	// BacklogDoneFirst counts the large group's jobs done by then.
	BacklogDoneFirst int64
}

// LatencyResult is one paced latency run. The sample slices are sorted.
type LatencyResult struct {
	// Rate is the target submit rate in jobs per second.
	Rate float64
	// Sent is how many jobs were submitted, Duration how long it took.
	Sent     int
	Duration time.Duration
	// Total holds one submit-to-done latency per job after the warm-up.
	Total []time.Duration
	// ToStart holds one submit-to-processor-start latency per job after the
	// warm-up (pipeline only: the peers' Total ends there).
	ToStart []time.Duration
	// SubmitToEnqueue and EnqueueToRecord split Total (pipeline only).
	SubmitToEnqueue, EnqueueToRecord []time.Duration
}

func sorted(d []time.Duration) []time.Duration {
	slices.Sort(d)
	return d
}

// sample is one job's submit time and latency.
type sample struct {
	submitNs int64
	d        time.Duration
}

// MillionResult is one system's million run: a throughput run on servers of
// its own while the redis-server's used_memory is sampled.
type MillionResult struct {
	ThroughputResult
	// BaseRedisBytes is used_memory just before the first submit, and
	// PeakRedisBytes the highest value sampled from then until the last job
	// was done (a last sample is taken then).
	BaseRedisBytes, PeakRedisBytes int64
	// Samples is how many times used_memory was read during the run.
	Samples int
}

// PeakBytes is PeakRedisBytes - BaseRedisBytes: the most memory the run
// added to the redis-server.
func (m MillionResult) PeakBytes() int64 { return m.PeakRedisBytes - m.BaseRedisBytes }
