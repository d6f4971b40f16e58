package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestCancelStopsWhatHasNotStarted: with 300 jobs of 500 ms, about a
// hundred jobs still called their endpoint after the cancel: a worker
// claims every job of the packs it pulls, and the jobs waiting there for a
// slot ran later without looking at their group again. Now a job that
// waited checks its group before it starts: after the cancel is
// acknowledged no more jobs call the endpoint than were already running
// (the worker's slots), and the final event's counts add up.
func TestCancelStopsWhatHasNotStarted(t *testing.T) {
	e := newEnv(t)
	d := newDownstream(t)
	const (
		n       = 300
		workers = 10
	)
	d.delay["promo"] = 500 * time.Millisecond
	r := e.start(e.config(func(c *config.Config) {
		c.WorkerCount = workers // the default, as are the rate and the packs
		c.JobTimeoutMs = 20_000
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
	}), stack.PipelineTargets, nil)
	q := r.st.Conns.Queue
	e.submitHTTP(d, "promo", n)
	testkit.WaitFor(t, "jobs running", 30*time.Second, func() bool {
		_, calls := d.count("promo", n)
		return calls >= workers
	})
	// Every job admitted by now is in READY or in a worker's hands.
	if err := e.client.Cancel(context.Background(), "promo"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the cancel acknowledged", 10*time.Second, func() bool {
		st, err := q.GroupState(context.Background(), ref("promo"))
		return err == nil && st == contracts.StateCancelled
	})
	_, atCancel := d.count("promo", n)
	ev := e.wait("promo", 30*time.Second)
	calls, total := d.count("promo", n)
	t.Logf("%d calls when the cancel was acknowledged, %d in all; final event %+v", atCancel, total, ev)
	if after := total - atCancel; after > workers {
		t.Errorf("%d jobs called the endpoint after the cancel was acknowledged; at most %d (the jobs already running) may", after, workers)
	}
	if ev.State != contracts.StateCancelled || ev.Jobs != n || ev.Succeeded+ev.Failed+ev.Cancelled != n {
		t.Fatalf("final event %+v: succeeded+failed+cancelled = %d, want %d", ev, ev.Succeeded+ev.Failed+ev.Cancelled, n)
	}
	if ev.Succeeded != int64(total) || ev.Failed != 0 {
		t.Errorf("%d jobs succeeded and %d failed, and the endpoint was called %d times", ev.Succeeded, ev.Failed, total)
	}
	for id, c := range calls {
		if c > 1 {
			t.Errorf("job %s called the endpoint %d times", id, c)
		}
	}
	info := group(t, q, "promo")
	if info.Succeeded != ev.Succeeded || info.Cancelled != ev.Cancelled {
		t.Errorf("final event %+v, Redis %+v", ev, info.GroupCounts)
	}
}
