package worker

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// DestReportEvery is how often a worker reports the outcomes it counted per
// destination to the adaptive rate controller (docs/ARCHITECTURE.md §5):
// one Redis call per interval, whatever the number of jobs.
const DestReportEvery = 100 * time.Millisecond

// destReporter counts outcomes per destination between reports.
type destReporter struct {
	mu     sync.Mutex
	counts map[string]*redisq.DestOutcome
	warn   telemetry.WarnLimiter // refusals, once a minute
}

func newDestReporter() *destReporter {
	return &destReporter{counts: map[string]*redisq.DestOutcome{}, warn: telemetry.WarnLimiter{Interval: time.Minute}}
}

// add counts one job's outcome at dest: accepted, or throttled with a
// Retry-After (0 = none).
func (r *destReporter) add(dest string, throttled bool, retryAfter time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.counts[dest]
	if o == nil {
		o = &redisq.DestOutcome{Destination: dest}
		r.counts[dest] = o
	}
	if throttled {
		o.Throttled++
		o.RetryAfter = max(o.RetryAfter, retryAfter)
	} else {
		o.Accepted++
	}
}

// take returns the counts since the last take and starts afresh.
func (r *destReporter) take() []redisq.DestOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return nil
	}
	out := make([]redisq.DestOutcome, 0, len(r.counts))
	for _, o := range r.counts {
		out = append(out, *o)
	}
	clear(r.counts)
	return out
}

// reportDestinations sends the counts to the controller; a failure drops
// them (the next report goes on: the controller needs no exact counts).
func (w *Worker) reportDestinations(ctx context.Context) {
	outs := w.dests.take()
	if len(outs) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	refused, err := w.d.Queue.ReportDestinations(rctx, outs)
	if err != nil {
		w.warn("reporting destination outcomes failed: the learned rates miss them", "err", err)
		return
	}
	if len(refused) > 0 {
		w.d.Metrics.DestinationsRefused.WithLabelValues("overall").Add(float64(len(refused)))
		w.dests.warn.Warn(w.log, "destinations refused by the adaptive rate: too many tracked, their rates are not learned",
			"refused", refused, "max", w.d.Queue.Config().Adaptive.MaxDestinations)
	}
}

// countDestination counts a run's outcome for the adaptive rate: a
// throttle (a rate-limited error; with
// redisq.AdaptiveConfig.TimeoutThrottles, a timeout), or an acceptance (any other outcome). A job's destination is
// its explicit one (contracts.ReadyJob.Destination), else its type.
func (w *Worker) countDestination(job *contracts.ReadyJob, kind processor.Outcome, after time.Duration, perr error) {
	if w.dests == nil {
		return
	}
	jobType := job.Destination
	if jobType == "" {
		jobType = job.Type
	}
	switch {
	case kind == processor.OutcomeRateLimited:
		w.dests.add(jobType, true, after)
	case w.d.Queue.Config().Adaptive.TimeoutThrottles && isTimeout(perr):
		w.dests.add(jobType, true, 0)
	default:
		w.dests.add(jobType, false, 0)
	}
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
