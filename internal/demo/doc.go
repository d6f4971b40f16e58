// Package demo is the workload and live view of `bulkaction dev --demo`:
// tenants of very different sizes and priorities submit bulk actions of
// "sleep" jobs against a low global rate, so that fair sharing, strict
// priority levels and rate limiting are visible, and one tenant's "http"
// jobs call a partner API the process serves itself (Partner, on a port of
// 127.0.0.1), whose token-bucket capacity changes during the run, so that
// the adaptive rate is seen learning it. Run submits the workload, shows
// each group's progress (bars on a terminal, plain periodic lines
// otherwise) and returns a Summary: per group jobs, outcomes, makespan and
// throttles per job, a verdict on how the small and urgent groups fared
// beside the big one, the rate learned of the partner beside its capacity,
// and the makespan beside what the limits and the partner's capacity allow.
package demo
