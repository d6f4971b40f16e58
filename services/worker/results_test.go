package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestResultBatchWaitsOnlyForJobsStillRunning: with a linger far away, a
// group's batch is published as soon as no job of the group is left
// running in the worker: the last runner to publish, or to leave without a
// result, sends it, and results of jobs running together share a message.
func TestResultBatchWaitsOnlyForJobsStillRunning(t *testing.T) {
	_, nc, js := testenv.NATS(t)
	ctx := context.Background()
	names := contracts.Names{Prefix: "rt"}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: names.StreamResult(), Subjects: []string{names.ResultAll()}})
	if err != nil {
		t.Fatal(err)
	}
	rs := newResults(deps.Deps{NC: nc, JS: js, Names: names}.Fill(), time.Hour)
	g := contracts.Group("t", "g")
	result := func(id string) contracts.JobResult {
		return contracts.JobResult{JobID: id, Attempt: 1, Status: contracts.ResultSuccess}
	}
	// publishAsync publishes in the background; the channel gets its error.
	publishAsync := func(id string, r *runner) chan error {
		ch := make(chan error, 1)
		go func() { ch <- rs.publish(ctx, g, result(id), r) }()
		return ch
	}
	waitFor := func(what string, ch chan error) {
		t.Helper()
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still waiting", what)
		}
	}
	messages := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	// waitGathered waits until g's open batch holds n results.
	waitGathered := func(n int) {
		t.Helper()
		testkit.WaitFor(t, "results gathered", 0, func() bool {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			b := rs.open[g]
			return b != nil && len(b.results) == n
		})
	}

	// The group's only running job: published at once.
	waitFor("a lone job's result", publishAsync("a", rs.begin(g)))
	if n := messages(); n != 1 {
		t.Fatalf("%d RESULT messages, want 1", n)
	}

	// Two running together: the first waits for the second's result.
	r1, r2 := rs.begin(g), rs.begin(g)
	first := publishAsync("b1", r1)
	waitGathered(1)
	select {
	case err := <-first:
		t.Fatalf("the first result of two running jobs was published (%v) while the other ran", err)
	default:
	}
	if n := messages(); n != 1 {
		t.Fatalf("%d RESULT messages while the other job ran, want 1", n)
	}
	waitFor("the second result", publishAsync("b2", r2))
	waitFor("the first result", first)
	if n := messages(); n != 2 {
		t.Fatalf("%d RESULT messages, want 2 (the two results in one)", n)
	}

	// The other job ends without a result (a retry, a hand-back): the
	// waiting result goes at once; leaving twice changes nothing.
	r1, r2 = rs.begin(g), rs.begin(g)
	first = publishAsync("c1", r1)
	waitGathered(1)
	rs.leave(r2)
	rs.leave(r2)
	rs.leave(r1) // it published: nothing to end
	waitFor("the result left alone", first)
	if n := messages(); n != 3 {
		t.Fatalf("%d RESULT messages, want 3", n)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.running) != 0 || len(rs.open) != 0 {
		t.Fatalf("running %v, open batches %d after every job ended", rs.running, len(rs.open))
	}
}
