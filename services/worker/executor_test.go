package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// serveTestExecutor is the executor of the tests' workers (TestMain): a
// "crash" job with {"poison":true} ends the process, any other sleeps a
// little and succeeds; a "verdict" job returns the outcome its payload
// names.
func serveTestExecutor() int {
	mux := processor.NewMux()
	mux.HandleFunc("crash", func(ctx context.Context, job *processor.Job) error {
		var p struct {
			Poison bool `json:"poison"`
		}
		if json.Unmarshal(job.Payload, &p) == nil && p.Poison {
			os.Exit(2)
		}
		select {
		case <-time.After(20 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	mux.HandleFunc("verdict", func(ctx context.Context, job *processor.Job) error {
		var p struct {
			Outcome string `json:"outcome"`
		}
		_ = json.Unmarshal(job.Payload, &p)
		switch p.Outcome {
		case "failed":
			return processor.Permanent(errors.New("bad input"))
		case "panic":
			panic("boom")
		case "success":
			return nil
		default:
			return errors.New("try again")
		}
	})
	if err := worker.ServeExecutor(context.Background(), mux); err != nil {
		fmt.Fprintln(os.Stderr, "executor:", err)
		return 1
	}
	return 0
}

// TestIsolatedPoisonTakesOnlyItsExecutor runs a worker with
// IsolationProcess over 40 jobs, one of which crashes the process that runs
// it: the worker keeps running, the jobs that ran beside the crash run
// again alone and succeed once each, the crashing job is FAILED as poison
// after MaxDeliveries solo runs, and no READY message waits for AckWait.
func TestIsolatedPoisonTakesOnlyItsExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{Mode: redisq.ModeFair})
	ctx := context.Background()
	g := grp("iso")
	jobs := make([]redisq.Job, 40)
	for i := range jobs {
		p := fmt.Sprintf(`{"n":%d}`, i)
		if i == 7 {
			p = `{"poison":true}`
		}
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "crash", Payload: []byte(p)}
	}
	if _, err := b.q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Seal(ctx, g, 40); err != nil {
		t.Fatal(err)
	}
	mux := processor.NewMux()
	mux.HandleFunc("crash", func(context.Context, *processor.Job) error {
		t.Error("a processor ran in the worker process")
		return nil
	})
	start := time.Now()
	runWorker(t, b, worker.Config{Concurrency: 10, Isolation: worker.IsolationProcess, MaxDeliveries: 2,
		AckWait: time.Minute}, mux)
	info := b.waitCompleted(t, "iso")
	took := time.Since(start)
	if info.Succeeded != 39 || info.Failed != 1 {
		t.Fatalf("succeeded %d failed %d, want 39 and 1", info.Succeeded, info.Failed)
	}
	poison := b.results.of("iso", "j7")
	if len(poison) != 1 || poison[0].Status != contracts.ResultFailed || !strings.Contains(poison[0].Error, "poison") {
		t.Fatalf("j7's results %+v, want one FAILED poison", poison)
	}
	for i := range 40 {
		if i == 7 {
			continue
		}
		if rs := b.results.of("iso", fmt.Sprintf("j%d", i)); len(rs) != 1 || rs[0].Status != contracts.ResultSuccess {
			t.Fatalf("j%d's results %+v, want one SUCCESS", i, rs)
		}
	}
	// The first crash, then MaxDeliveries solo runs of j7 that crash too.
	if n := testkit.Value(t, b.metrics.ExecutorExits); n < 3 {
		t.Errorf("%v executor exits counted, want at least 3", n)
	}
	if took > 30*time.Second {
		t.Errorf("took %s: a message waited for AckWait (1 min)?", took)
	}
}

// TestIsolatedOutcomes: each outcome a processor gives in the executor is
// the worker's outcome: success, retry (until MaxRetryCount), a permanent
// failure and a panic.
func TestIsolatedOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{Mode: redisq.ModeFair})
	ctx := context.Background()
	g := grp("verdicts")
	outcomes := []string{"success", "retry", "failed", "panic"}
	var jobs []redisq.Job
	for _, o := range outcomes {
		jobs = append(jobs, redisq.Job{Group: g, ID: o, Type: "verdict", Payload: []byte(`{"outcome":"` + o + `"}`)})
	}
	if _, err := b.q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Seal(ctx, g, int64(len(jobs))); err != nil {
		t.Fatal(err)
	}
	mux := processor.NewMux()
	mux.HandleFunc("verdict", func(context.Context, *processor.Job) error { return nil })
	runWorker(t, b, worker.Config{Isolation: worker.IsolationProcess, MaxRetryCount: 1}, mux)
	b.waitCompleted(t, "verdicts")
	want := map[string]struct {
		status contracts.ResultStatus
		err    string
	}{
		"success": {contracts.ResultSuccess, ""},
		"retry":   {contracts.ResultFailed, "try again"},
		"failed":  {contracts.ResultFailed, "bad input"},
		"panic":   {contracts.ResultFailed, "boom"},
	}
	for _, o := range outcomes {
		rs := b.results.of("verdicts", o)
		if len(rs) != 1 || rs[0].Status != want[o].status || !strings.Contains(rs[0].Error, want[o].err) {
			t.Errorf("%s: results %+v, want %s %q", o, rs, want[o].status, want[o].err)
		}
	}
	if n := b.jobResults("verdict", "RETRY"); n != 1 {
		t.Errorf("%d retries counted, want 1 (MaxRetryCount 1)", n)
	}
}
