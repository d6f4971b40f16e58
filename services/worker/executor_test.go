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
			Poison bool   `json:"poison"`
			Runs   string `json:"runs"` // a directory where each run leaves a file
		}
		_ = json.Unmarshal(job.Payload, &p)
		if p.Runs != "" {
			f, err := os.CreateTemp(p.Runs, job.JobID+"-*")
			if err != nil {
				return err
			}
			f.Close()
		}
		if p.Poison {
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
// it: the worker keeps running, every other job runs once and succeeds, the
// crashing job is FAILED as poison after its first crash and MaxDeliveries
// counted runs, and no READY message waits for AckWait.
func TestIsolatedPoisonTakesOnlyItsExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{GlobalLimit: 1 << 30}) // no rate gate to speak of
	ctx := context.Background()
	g := grp("iso")
	runs := t.TempDir()
	jobs := make([]redisq.Job, 40)
	for i := range jobs {
		p := fmt.Sprintf(`{"n":%d,"runs":%q}`, i, runs)
		if i == 7 {
			p = fmt.Sprintf(`{"poison":true,"runs":%q}`, runs)
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
	for i := range 40 {
		id := fmt.Sprintf("j%d", i)
		b.results.wait(t, "iso", id) // recorded before the collector keeps it
		rs := b.results.of("iso", id)
		switch {
		case i == 7 && (len(rs) != 1 || rs[0].Status != contracts.ResultFailed || !strings.Contains(rs[0].Error, "poison")):
			t.Fatalf("j7's results %+v, want one FAILED poison", rs)
		case i != 7 && (len(rs) != 1 || rs[0].Status != contracts.ResultSuccess):
			t.Fatalf("%s's results %+v, want one SUCCESS", id, rs)
		}
	}
	// The first crash, then MaxDeliveries counted runs of j7 that crash
	// too; no other job ran twice (each ran alone in its executor).
	if n := testkit.Value(t, b.metrics.ExecutorExits); n != 3 {
		t.Errorf("%v executor exits counted, want 3", n)
	}
	files, err := os.ReadDir(runs)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, f := range files {
		ran[strings.Split(f.Name(), "-")[0]]++
	}
	for i := range 40 {
		want := 1
		if i == 7 {
			want = 3
		}
		if got := ran[fmt.Sprintf("j%d", i)]; got != want {
			t.Errorf("j%d ran %d times, want %d", i, got, want)
		}
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
	b := setup(t, redisq.Config{GlobalLimit: 1 << 30}) // no rate gate to speak of
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
		b.results.wait(t, "verdicts", o)
		rs := b.results.of("verdicts", o)
		if len(rs) != 1 || rs[0].Status != want[o].status || !strings.Contains(rs[0].Error, want[o].err) {
			t.Errorf("%s: results %+v, want %s %q", o, rs, want[o].status, want[o].err)
		}
	}
	if n := b.jobResults("verdict", "RETRY"); n != 1 {
		t.Errorf("%d retries counted, want 1 (MaxRetryCount 1)", n)
	}
}
