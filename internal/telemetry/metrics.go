package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the prefix of every metric name of the system (bulk_action_*).
const Namespace = "bulk_action"

// Label values of bulk_action_rate_limit_denied_total{reason}.
const (
	// DenyReasonGlobal means the global per-window limit was used up.
	DenyReasonGlobal = "global"
	// DenyReasonGroup means the group's share of the global limit was used up.
	DenyReasonGroup = "group"
	// DenyReasonPacing means paced admission skipped a group until the next window.
	DenyReasonPacing = "pacing"
)

// Label values of bulk_action_backpressure_admitted_total{destination}.
const (
	// DestinationReady means an admitted job went straight to the READY stream.
	DestinationReady = "ready"
	// DestinationNonReady means an admitted job was parked in the non-ready (backoff) queue.
	DestinationNonReady = "non_ready"
)

// Label values of bulk_action_job_results_total{status}; the first two are also used by
// bulk_action_recorded_results_total{status}.
const (
	// StatusSuccess is a job that ran successfully.
	StatusSuccess = "SUCCESS"
	// StatusFailed is a job that failed permanently (or ran out of attempts).
	StatusFailed = "FAILED"
	// StatusRetry is a job attempt that failed with a retryable error and was backed off.
	StatusRetry = "RETRY"
	// StatusRateLimited is a job attempt rejected by the downstream system (for example HTTP 429).
	StatusRateLimited = "RATE_LIMITED"
	// StatusDropped is a stale or cancelled delivery that was acknowledged without running.
	StatusDropped = "DROPPED"
	// StatusDuplicate is a result the aggregator had already counted (recorded results only).
	StatusDuplicate = "DUPLICATE"
)

// Label values of bulk_action_group_completions_total{state}.
// Reasons of [Metrics.AdmissionHeld].
const (
	// HeldNoWorker: no live worker serves the job type.
	HeldNoWorker = "no_worker"
	// HeldReadyFull: the job type's READY room is used up.
	HeldReadyFull = "ready_full"
	// HeldTypeRate: the job type's rate limit (TYPE_RATE_LIMITS) is used up
	// in the current window, or its pacer is ahead.
	HeldTypeRate = "type_rate"
)

const (
	// StateCompleted is a sealed group whose jobs are all terminal.
	StateCompleted = "COMPLETED"
	// StateCancelled is a group ended early by a cancel request.
	StateCancelled = "CANCELLED"
)

// Histogram buckets, in milliseconds.
var (
	// luaBucketsMs are the buckets of bulk_action_lua_duration_ms: 0.05 ms to 250 ms.
	luaBucketsMs = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250}
	// dispatchCycleBucketsMs are the buckets of bulk_action_dispatch_cycle_duration_ms: 0.5 ms to 5 s.
	dispatchCycleBucketsMs = []float64{0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}
	// backoffBucketsMs are the buckets of bulk_action_congestion_backoff_ms: 100 ms to 300 s.
	backoffBucketsMs = []float64{100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000, 300000}
	// processingBucketsMs are the buckets of bulk_action_job_processing_duration_ms: 1 ms to 120 s.
	processingBucketsMs = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000}
	// latencyBucketsMs are the buckets of bulk_action_job_latency_ms: 10 ms to 1 h.
	latencyBucketsMs = []float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000}
)

// Metrics holds every Prometheus collector of the system. Names are built with
// prometheus.BuildFQName(Namespace, "", name); durations are in milliseconds.
//
// Create it with [NewMetrics]; the zero value has nil collectors and is not usable.
// All collectors are safe for concurrent use.
type Metrics struct {
	// EnqueueTotal is bulk_action_enqueue_total: jobs newly enqueued into the fair queue.
	EnqueueTotal prometheus.Counter
	// EnqueueDuplicateTotal is bulk_action_enqueue_duplicate_total: redelivered or duplicate
	// submissions that were no-ops.
	EnqueueDuplicateTotal prometheus.Counter
	// DequeueTotal is bulk_action_dequeue_total: jobs taken out of the fair queue.
	DequeueTotal prometheus.Counter
	// LuaDuration is bulk_action_lua_duration_ms{script}: time of one Lua script call
	// (buckets 0.05 ms to 250 ms). Use [Metrics.ObserveLua].
	LuaDuration *prometheus.HistogramVec
	// RateLimitAllowed is bulk_action_rate_limit_allowed_total: jobs the rate gate let through.
	RateLimitAllowed prometheus.Counter
	// RateLimitDenied is bulk_action_rate_limit_denied_total{reason}, reason one of
	// [DenyReasonGlobal], [DenyReasonGroup], [DenyReasonPacing].
	RateLimitDenied *prometheus.CounterVec
	// DispatchMoved is bulk_action_dispatch_moved_total: jobs the dispatcher moved from the
	// non-ready queue (or expired leases) to READY.
	DispatchMoved prometheus.Counter
	// DispatchCycleDuration is bulk_action_dispatch_cycle_duration_ms: one dispatcher cycle
	// (buckets 0.5 ms to 5 s).
	DispatchCycleDuration prometheus.Histogram
	// BackpressureAdmitted is bulk_action_backpressure_admitted_total{destination}, destination
	// [DestinationReady] or [DestinationNonReady].
	BackpressureAdmitted *prometheus.CounterVec
	// BackpressureRejected is bulk_action_backpressure_rejected_total: admissions skipped because
	// READY was full.
	BackpressureRejected prometheus.Counter
	// AdmissionHeld is bulk_action_admission_held_total{reason}: groups passed by in an admission
	// round because the job type of their next job had no READY room, reason [HeldNoWorker] (no
	// live worker serves the type) or [HeldReadyFull] (the type's room is used up), or no rate
	// left, reason [HeldTypeRate] (the type's rate limit is used up).
	AdmissionHeld *prometheus.CounterVec
	// CongestionBackoff is bulk_action_congestion_backoff_ms: the backoff given to a parked job
	// (buckets 100 ms to 300 s).
	CongestionBackoff prometheus.Histogram
	// JobResults is bulk_action_job_results_total{type,status}: attempt outcomes seen by workers,
	// status one of [StatusSuccess], [StatusFailed], [StatusRetry], [StatusRateLimited], [StatusDropped].
	JobResults *prometheus.CounterVec
	// ProcessingDuration is bulk_action_job_processing_duration_ms{type}: time a processor ran
	// (buckets 1 ms to 120 s).
	ProcessingDuration *prometheus.HistogramVec
	// RecordedResults is bulk_action_recorded_results_total{status}: results counted by the
	// aggregator exactly once, status [StatusSuccess], [StatusFailed], [StatusDuplicate]
	// (a result that had already been counted) or [StatusDropped] (a result of a job Redis does
	// not know).
	RecordedResults *prometheus.CounterVec
	// ResultsFenced is bulk_action_results_fenced_total: results the aggregator acknowledged
	// without counting because their job was not in flight with their attempt (still queued,
	// backing off, or at another attempt: a late, lost or forged result; docs/ARCHITECTURE.md §6.4).
	ResultsFenced prometheus.Counter
	// GroupCompletions is bulk_action_group_completions_total{state}, state [StateCompleted] or
	// [StateCancelled].
	GroupCompletions *prometheus.CounterVec
	// DeadLetters is bulk_action_dead_letter_total{reason}: messages sent to the DLQ stream.
	DeadLetters *prometheus.CounterVec
	// DeadLetterFailures is bulk_action_dead_letter_failures_total: rejected messages whose dead
	// letter could not be stored, so they stay on their stream and come again with a growing
	// delay. Alert on any increase.
	DeadLetterFailures prometheus.Counter
	// SubmitReplayed is bulk_action_submit_replayed_total{outcome}: SUBMIT messages applied again
	// after Redis restarted (docs/ARCHITECTURE.md §6.7): "replayed" (stored again),
	// "dead_lettered" for accepted messages the replay could not store again (dead-lettered with
	// their reason), "rejected_before" for messages dead-lettered when first received (not
	// dead-lettered again), or "purged" for messages the replay needed but SUBMIT no longer held
	// (Redis came back older than SUBMIT_REPLAY_WINDOW). Alert on any "purged" or "dead_lettered".
	SubmitReplayed *prometheus.CounterVec
	// ControlMessages is bulk_action_control_messages_total{kind,outcome}: pause and resume
	// messages the fetchers applied, by kind (pause, resume) and outcome (paused, resumed,
	// unchanged, ended, unknown, superseded). "superseded" counts messages older (SUBMIT
	// sequence) than the last pause or resume their group took: delivered out of their publish
	// order (two fetchers, a redelivery), acknowledged without effect.
	ControlMessages *prometheus.CounterVec
	// ExecutorExits is bulk_action_executor_exits_total: executor processes (worker isolation
	// "process") that exited while they ran jobs; each of those jobs runs again alone. A poison
	// job makes a few; a steady rate means processors that crash.
	ExecutorExits prometheus.Counter
	// DestinationsRefused is bulk_action_destinations_refused_total{scope}: scope="overall",
	// destinations a worker reported to the adaptive rate and that were refused (not learned:
	// ADAPTIVE_RATE_MAX_DESTINATIONS are tracked already), one per destination per report, their
	// jobs keeping the per-job backoff; scope="tenant", jobs a fetcher stored without their
	// explicit destination because their tenant had ADAPTIVE_RATE_MAX_DESTINATIONS_PER_TENANT
	// already (they fall back to their type).
	DestinationsRefused *prometheus.CounterVec
	// SubmitLatency is bulk_action_job_latency_ms: time from submission to the recorded result
	// (buckets 10 ms to 1 h).
	SubmitLatency prometheus.Histogram
	// GatewayRequests is bulk_action_gateway_requests_total{op,code}: HTTP API requests by
	// operation (the OpenAPI operationId) and status code.
	GatewayRequests *prometheus.CounterVec
	// GatewaySSE is bulk_action_gateway_sse_subscribers: open Server-Sent Events streams.
	GatewaySSE prometheus.Gauge
	// GatewayKeysBadLines is bulk_action_gateway_keys_file_bad_lines: lines of the keys file,
	// as last read, skipped as invalid.
	GatewayKeysBadLines prometheus.Gauge
	// GroupsRepaired is bulk_action_groups_repaired_total{reason}: repairs the stuck check made
	// to groups without progress (reliability.go).
	GroupsRepaired *prometheus.CounterVec
	// Callbacks is bulk_action_callbacks_total{outcome}: attempts of completion callbacks
	// (callbacks.go).
	Callbacks *prometheus.CounterVec
	// CallbacksPending is bulk_action_callbacks_pending: completion callbacks not yet delivered
	// nor failed.
	CallbacksPending prometheus.Gauge
	// Streams are the JetStream streams' fill gauges (streams.go).
	Streams *StreamGauges
}

// NewMetrics creates every collector and registers it on reg. reg must not be nil: pass a
// prometheus.NewRegistry() (and serve it with [NewServer]) or prometheus.DefaultRegisterer.
// Several Metrics may coexist in one process as long as each has its own registry.
//
// Label values with a fixed set (denial reasons, destinations, recorded statuses, completion
// states) are initialised to zero so their series exist before the first event.
//
// NewMetrics panics if reg is nil or if one of the names is already registered on reg, as
// promauto does; both are programming errors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		panic("telemetry: NewMetrics needs a non-nil prometheus.Registerer")
	}
	m := &Metrics{
		EnqueueTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("enqueue_total"),
			Help: "Jobs newly enqueued into the fair queue.",
		}),
		EnqueueDuplicateTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("enqueue_duplicate_total"),
			Help: "Redelivered or duplicate job submissions that were no-ops.",
		}),
		DequeueTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("dequeue_total"),
			Help: "Jobs taken out of the fair queue.",
		}),
		LuaDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    fqName("lua_duration_ms"),
			Help:    "Duration of one Redis Lua script call, in milliseconds.",
			Buckets: luaBucketsMs,
		}, []string{"script"}),
		RateLimitAllowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("rate_limit_allowed_total"),
			Help: "Jobs allowed by the rate gate.",
		}),
		RateLimitDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("rate_limit_denied_total"),
			Help: "Jobs or groups held back by the rate gate, by reason (global, group, pacing).",
		}, []string{"reason"}),
		DispatchMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("dispatch_moved_total"),
			Help: "Jobs moved by the dispatcher to the READY stream.",
		}),
		DispatchCycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    fqName("dispatch_cycle_duration_ms"),
			Help:    "Duration of one dispatcher cycle, in milliseconds.",
			Buckets: dispatchCycleBucketsMs,
		}),
		BackpressureAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("backpressure_admitted_total"),
			Help: "Jobs admitted by the fetcher, by destination (ready, non_ready).",
		}, []string{"destination"}),
		BackpressureRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("backpressure_rejected_total"),
			Help: "Admission rounds skipped or cut short because READY was full for the waiting jobs' types.",
		}),
		AdmissionHeld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("admission_held_total"),
			Help: "Groups passed by in an admission round because their next job's type had no READY room or no rate left, by reason (no_worker, ready_full, type_rate).",
		}, []string{"reason"}),
		CongestionBackoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    fqName("congestion_backoff_ms"),
			Help:    "Backoff given to a job parked in the non-ready queue, in milliseconds.",
			Buckets: backoffBucketsMs,
		}),
		JobResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("job_results_total"),
			Help: "Job attempt outcomes seen by workers, by job type and status.",
		}, []string{"type", "status"}),
		ProcessingDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    fqName("job_processing_duration_ms"),
			Help:    "Time a processor ran for one job attempt, in milliseconds, by job type.",
			Buckets: processingBucketsMs,
		}, []string{"type"}),
		RecordedResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("recorded_results_total"),
			Help: "Results counted by the aggregator (exactly once), by status (SUCCESS, FAILED, DUPLICATE).",
		}, []string{"status"}),
		ResultsFenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("results_fenced_total"),
			Help: "Results not counted because their job was not in flight with their attempt (queued, backing off, another attempt).",
		}),
		GroupCompletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("group_completions_total"),
			Help: "Groups that reached a final state, by state (COMPLETED, CANCELLED).",
		}, []string{"state"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("dead_letter_total"),
			Help: "Messages sent to the dead-letter stream, by reason.",
		}, []string{"reason"}),
		DeadLetterFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("dead_letter_failures_total"),
			Help: "Rejected messages whose dead letter could not be stored; they come again with a growing delay.",
		}),
		SubmitReplayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("submit_replayed_total"),
			Help: "SUBMIT messages applied again after a Redis restart (replayed), accepted but not storable again and dead-lettered (dead_lettered), dead-lettered when first received (rejected_before), or needed but no longer held (purged).",
		}, []string{"outcome"}),
		ControlMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("control_messages_total"),
			Help: "Pause and resume messages applied, by kind and outcome (superseded: older than the last one its group took).",
		}, []string{"kind", "outcome"}),
		ExecutorExits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: fqName("executor_exits_total"),
			Help: "Worker executor processes that exited while they ran jobs (each job then runs again alone).",
		}),
		DestinationsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: fqName("destinations_refused_total"),
			Help: "Destinations refused: scope=overall, reported to the adaptive rate while ADAPTIVE_RATE_MAX_DESTINATIONS are tracked already, one per destination per report; " +
				"scope=tenant, jobs stored without their explicit destination (they fall back to their type) because their tenant has ADAPTIVE_RATE_MAX_DESTINATIONS_PER_TENANT.",
		}, []string{"scope"}),
		SubmitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    fqName("job_latency_ms"),
			Help:    "Time from job submission to its recorded result, in milliseconds.",
			Buckets: latencyBucketsMs,
		}),
	}
	reg.MustRegister(
		m.EnqueueTotal, m.EnqueueDuplicateTotal, m.DequeueTotal, m.LuaDuration,
		m.RateLimitAllowed, m.RateLimitDenied, m.DispatchMoved, m.DispatchCycleDuration,
		m.BackpressureAdmitted, m.BackpressureRejected, m.AdmissionHeld, m.CongestionBackoff,
		m.JobResults, m.ProcessingDuration, m.RecordedResults, m.ResultsFenced, m.GroupCompletions,
		m.DeadLetters, m.DeadLetterFailures, m.SubmitReplayed, m.ControlMessages, m.ExecutorExits, m.DestinationsRefused,
		m.SubmitLatency,
	)
	for _, sc := range []string{"overall", "tenant"} {
		m.DestinationsRefused.WithLabelValues(sc)
	}
	for _, k := range []string{"pause", "resume"} {
		m.ControlMessages.WithLabelValues(k, "superseded")
	}
	for _, o := range []string{"replayed", "dead_lettered", "rejected_before", "purged"} {
		m.SubmitReplayed.WithLabelValues(o)
	}
	for _, r := range []string{DenyReasonGlobal, DenyReasonGroup, DenyReasonPacing} {
		m.RateLimitDenied.WithLabelValues(r)
	}
	for _, r := range []string{HeldNoWorker, HeldReadyFull, HeldTypeRate} {
		m.AdmissionHeld.WithLabelValues(r)
	}
	for _, d := range []string{DestinationReady, DestinationNonReady} {
		m.BackpressureAdmitted.WithLabelValues(d)
	}
	for _, s := range []string{StatusSuccess, StatusFailed, StatusDuplicate} {
		m.RecordedResults.WithLabelValues(s)
	}
	for _, s := range []string{StateCompleted, StateCancelled} {
		m.GroupCompletions.WithLabelValues(s)
	}
	m.registerGateway(reg)
	m.registerReliability(reg)
	m.registerCallbacks(reg)
	m.registerStreams(reg)
	return m
}

// ObserveLua records one call of the Lua script named script that took d.
func (m *Metrics) ObserveLua(script string, d time.Duration) {
	m.LuaDuration.WithLabelValues(script).Observe(Milliseconds(d))
}

// ObserveProcessing records one processor run of a job of type jobType that took d.
func (m *Metrics) ObserveProcessing(jobType string, d time.Duration) {
	m.ProcessingDuration.WithLabelValues(jobType).Observe(Milliseconds(d))
}

// ObserveDispatchCycle records one dispatcher cycle that took d.
func (m *Metrics) ObserveDispatchCycle(d time.Duration) {
	m.DispatchCycleDuration.Observe(Milliseconds(d))
}

// ObserveBackoff records the backoff d given to a job parked in the non-ready queue.
func (m *Metrics) ObserveBackoff(d time.Duration) {
	m.CongestionBackoff.Observe(Milliseconds(d))
}

// ObserveSubmitLatency records the time d from a job's submission to its recorded result.
func (m *Metrics) ObserveSubmitLatency(d time.Duration) {
	m.SubmitLatency.Observe(Milliseconds(d))
}

// Milliseconds converts d to fractional milliseconds, the unit of every duration metric here.
func Milliseconds(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}

func fqName(name string) string {
	return prometheus.BuildFQName(Namespace, "", name)
}
