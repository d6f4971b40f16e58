// Package demo is the workload and live view of `bulkaction dev --demo`:
// tenants of very different sizes and priorities submit bulk actions of
// "sleep" jobs against a low global rate, so that fair sharing, strict
// priority levels and rate limiting are visible. Run submits the workload,
// shows each group's progress (bars on a terminal, plain periodic lines
// otherwise) and returns a Summary: per group jobs, outcomes, makespan and
// throttles per job, and a verdict on how the small and urgent groups fared
// beside the big one.
package demo
