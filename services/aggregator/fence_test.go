package aggregator_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

// TestFencedResultsAreAckedNotCounted: results for jobs that never left
// the queue (forged on the group's result subject), for an attempt the job
// is not at, and for a job backing off are acknowledged, counted in
// bulk_action_results_fenced_total and logged in one line per batch
// without payloads; the group's counts stay exact, and the legitimate
// results of the same batch count.
func TestFencedResultsAreAckedNotCounted(t *testing.T) {
	b := setup(t)
	d, m := b.newDeps()
	ctx := context.Background()
	b.admitted(t, "g", 3, 6) // j0..j2 leased as attempt 1; sealed at 6
	queued := make([]redisq.Job, 3)
	for i := range queued {
		queued[i] = redisq.Job{Group: grp("g"), ID: fmt.Sprintf("q%d", i), Type: "t"}
	}
	if _, err := b.q.EnqueueJobs(ctx, queued); err != nil {
		t.Fatal(err)
	}
	// j2 ran and backs off
	if out, err := b.q.Claim(ctx, grp("g"), "j2", 1); err != nil || out != redisq.ClaimRun {
		t.Fatalf("claim: %s %v", out, err)
	}
	if _, err := b.q.Retry(ctx, grp("g"), "j2", 1, -1, "busy"); err != nil {
		t.Fatal(err)
	}

	forged := failure("g", "q0", 1, "secret payload-like text")
	batch := []contracts.JobResult{
		success("g", "j0", 1), // counts
		forged,                // queued: never ran
		success("g", "q1", 2), // queued
		success("g", "j1", 2), // leased as attempt 1
		success("g", "j2", 1), // backing off
	}
	b.publishBatch(t, grp("g"), batch, "", nil)
	b.publish(t, failure("g", "j1", 1, "boom"), "", nil) // counts
	b.publish(t, success("g", "q2", 1), "", nil)         // queued
	run(t, aggregator.Config{}, d, nil)
	b.waitSettled(t)

	if g := b.group(t, "g"); g.Done != 2 || g.Succeeded != 1 || g.Failed != 1 || g.Pending != 3 || g.State.Terminal() {
		t.Fatalf("group after fenced results: %+v pending %d", g.GroupCounts, g.Pending)
	}
	if n := counterValue(m.ResultsFenced); n != 5 {
		t.Errorf("results_fenced_total = %d, want 5", n)
	}
	for status, want := range map[string]int{telemetry.StatusSuccess: 1, telemetry.StatusFailed: 1, telemetry.StatusDuplicate: 0, telemetry.StatusDropped: 0} {
		if n := counterValue(m.RecordedResults.WithLabelValues(status)); n != want {
			t.Errorf("recorded_results{%s} = %d, want %d", status, n, want)
		}
	}
	const msg = "results fenced off: their jobs are not in flight with their attempts"
	lines := append(b.logs.find(slog.LevelWarn, msg, "", ""), b.logs.find(slog.LevelDebug, msg, "", "")...)
	if len(lines) == 0 || len(lines) > 3 {
		t.Fatalf("%d log lines for 2 batches with fenced results, want one per batch", len(lines))
	}
	total := 0
	for _, l := range lines {
		for k, v := range l.Attrs {
			if v == forged.Error || k == "error" || k == "payload" {
				t.Errorf("log line carries %s=%q", k, v)
			}
		}
		var n int
		fmt.Sscan(l.Attrs["results"], &n)
		total += n
	}
	if total != 5 {
		t.Errorf("log lines count %d fenced results, want 5", total)
	}
	if kept, _ := b.q.FailuresKept(ctx, grp("g")); kept != 1 {
		t.Errorf("failures index holds %d, want 1 (j1 only)", kept)
	}
}
