package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// The tests of READY packs as the hand-off makes them (handoff.Publish
// packs the jobs of a type) and of results gathered into RESULT batches.

// testPack is the pack size of these tests (a fetcher's or dispatcher's
// ReadyPackJobs; the default, 1, makes no packs).
const testPack = 8

// packOf enqueues n jobs of type "t" in group gid (sealed with n), leases
// them and hands them to READY with handoff.Publish: one pack while n is at
// most testPack.
func (b *testBundle) packOf(t *testing.T, gid string, n int) {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: grp(gid), ID: fmt.Sprintf("j%d", i), Type: "t", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	leased := b.env.Lease(t, jobs)
	if _, err := b.q.Seal(ctx, grp(gid), int64(n)); err != nil {
		t.Fatal(err)
	}
	if ok, err := handoff.Publish(ctx, b.d, leased, handoff.Packing{Jobs: testPack}, handoff.SpanAdmit); err != nil || len(ok) != n {
		t.Fatalf("publish: %d of %d, %v", len(ok), n, err)
	}
}

// barrier returns a processor whose runs wait until n of them have
// started (or 5 s passed), so that they finish together.
func barrier(n int, c *calls) processor.ProcessorFunc {
	var started atomic.Int32
	all := make(chan struct{})
	return func(_ context.Context, job *processor.Job) error {
		c.add(job)
		if started.Add(1) == int32(n) {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		return nil
	}
}

// TestResultBatchGathersAGroup: jobs of one group that finish together
// publish their results in fewer RESULT messages than results, each with
// the batch's message id; each result is recorded once, and the READY pack
// is acknowledged after.
func TestResultBatchGathersAGroup(t *testing.T) {
	t.Parallel()
	const n = 6
	b := setupWithoutFeeder(t, redisq.Config{})
	c := newCalls()
	mux := processor.NewMux()
	mux.Handle("t", barrier(n, c))
	runWorker(t, b, worker.Config{Concurrency: n}, mux)
	b.packOf(t, "g", n)

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n {
		t.Fatalf("group = %+v, want %d succeeded", info.GroupCounts, n)
	}
	// the collector notes a message after recording it: the group may
	// complete first
	testkit.WaitFor(t, "every result collected", waitTimeout, func() bool { return len(b.results.all()) >= n })
	batches := map[string]int{}
	for _, r := range b.results.all() {
		if r.Outcome != redisq.Recorded {
			t.Errorf("result %+v recorded as %s", r.JobResult, r.Outcome)
		}
		if id := r.Header.Get(jetstream.MsgIDHeader); id != r.BatchID {
			t.Errorf("result %s in a message with id %q, want the batch's %q", r.JobID, id, r.BatchID)
		}
		batches[r.BatchID]++
	}
	if len(b.results.all()) != n || len(batches) >= n {
		t.Fatalf("%d results in %d RESULT messages, want %d in fewer", len(b.results.all()), len(batches), n)
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
}

// TestResultBatchFailureHandsItsJobsBack: a RESULT batch whose publish
// fails hands back every job in it: the pack comes back, the jobs run again
// (not as suspects), and each is counted once.
func TestResultBatchFailureHandsItsJobsBack(t *testing.T) {
	t.Parallel()
	const n = 4
	b := setupWithoutFeeder(t, redisq.Config{})
	fjs := &failingJS{JetStream: b.js, subject: b.names.Result(grp("g"))}
	fjs.fail.Store(1)
	d := b.d
	d.JS = fjs
	c := newCalls()
	mux := processor.NewMux()
	mux.Handle("t", barrier(n, c))
	w, err := worker.New(worker.Config{Concurrency: n}, mux, d)
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartWithin(t, w, 15*time.Second)
	b.packOf(t, "g", n)

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n || info.Done != n {
		t.Fatalf("group = %+v, want each of the %d jobs counted once", info.GroupCounts, n)
	}
	if fjs.fail.Load() >= 0 {
		t.Fatal("the injected failure was not hit")
	}
	reruns := 0
	for i := range n {
		switch runs := c.count(key("g", fmt.Sprintf("j%d", i))); runs {
		case 1:
		case 2:
			reruns++
		default:
			t.Errorf("j%d ran %d times, want once, or twice if its result's batch failed", i, runs)
		}
	}
	if reruns == 0 {
		t.Fatal("no job ran again after its result's batch failed")
	}
	for _, r := range b.results.all() {
		if r.Outcome != redisq.Recorded {
			t.Errorf("result %+v recorded as %s, want every stored result recorded", r.JobResult, r.Outcome)
		}
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	if info := b.consumerInfo(t, w, "t"); info.Delivered.Consumer != 2 {
		t.Fatalf("READY consumer delivered %d, want the pack twice (handed back once)", info.Delivered.Consumer)
	}
	if n := b.jobResults("t", telemetry.StatusSuccess); n != 4 {
		t.Fatalf("job_results{t,SUCCESS} = %d, want 4", n)
	}
}

// TestPackKeptInProgressWhileJobsWait: the jobs of a pack that wait for a
// slot keep the message in progress, so a pack whose jobs take longer in
// all than AckWait is not delivered again (its waiting jobs would run twice,
// as suspects).
func TestPackKeptInProgressWhileJobsWait(t *testing.T) {
	t.Parallel()
	const n = 4
	b := setupWithoutFeeder(t, redisq.Config{})
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		time.Sleep(450 * time.Millisecond)
		return nil
	})
	// one slot: the 4 jobs run one after the other, 1.8 s in all
	w := startWorker(t, b, worker.Config{Concurrency: 1, AckWait: time.Second, JobTimeout: time.Second}, mux)
	b.packOf(t, "g", n)

	b.waitCompleted(t, "g")
	for i := range n {
		if runs := c.count(key("g", fmt.Sprintf("j%d", i))); runs != 1 {
			t.Errorf("j%d ran %d times, want once", i, runs)
		}
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	if info := b.consumerInfo(t, w, "t"); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Fatalf("READY consumer delivered %d, redelivered %d: want the pack delivered once", info.Delivered.Consumer, info.NumRedelivered)
	}
}

// TestPackSuspectRunsAlone: a suspect inside a pack (its attempt RUNNING,
// never handed back) runs alone in its worker while the other jobs of its
// pack run beside each other; each job runs and is counted once.
func TestPackSuspectRunsAlone(t *testing.T) {
	t.Parallel()
	const n = 4
	b := setupWithoutFeeder(t, redisq.Config{})
	ctx := context.Background()
	var mu sync.Mutex
	running := map[string]bool{}
	var overlaps []string
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		mu.Lock()
		for other := range running {
			if other == "j1" || job.JobID == "j1" {
				overlaps = append(overlaps, job.JobID+" with "+other)
			}
		}
		running[job.JobID] = true
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		delete(running, job.JobID)
		mu.Unlock()
		return nil
	})
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: grp("g"), ID: fmt.Sprintf("j%d", i), Type: "t"}
	}
	leased := b.env.Lease(t, jobs)
	if _, err := b.q.Seal(ctx, grp("g"), n); err != nil {
		t.Fatal(err)
	}
	// j1's attempt 1 was claimed by a worker that stopped without handing it back
	if out, err := b.q.Claim(ctx, grp("g"), "j1", 1); err != nil || out != redisq.ClaimRun {
		t.Fatalf("claim j1: %s %v", out, err)
	}
	if ok, err := handoff.Publish(ctx, b.d, leased, handoff.Packing{Jobs: testPack}, handoff.SpanAdmit); err != nil || len(ok) != n {
		t.Fatalf("publish: %d %v", len(ok), err)
	}
	runWorker(t, b, worker.Config{Concurrency: n}, mux)

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n || info.Done != n {
		t.Fatalf("group = %+v, want each job counted once", info.GroupCounts)
	}
	for i := range n {
		if runs := c.count(key("g", fmt.Sprintf("j%d", i))); runs != 1 {
			t.Errorf("j%d ran %d times, want once", i, runs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("the suspect j1 did not run alone: %v", overlaps)
	}
}

// TestPackWorkerStopsMidPack: a worker that stops (no grace) while some
// jobs of a pack have finished and others run hands the pack back; the next
// worker drops the finished jobs as stale and runs the others: nothing is
// lost and nothing is counted twice.
func TestPackWorkerStopsMidPack(t *testing.T) {
	t.Parallel()
	const n = 3
	b := setupWithoutFeeder(t, redisq.Config{})
	blocked := make(chan struct{}, n)
	first := processor.NewMux()
	first.HandleFunc("t", func(ctx context.Context, job *processor.Job) error {
		if job.JobID == "j0" {
			return nil
		}
		blocked <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	stopFirst := runWorker(t, b, worker.Config{Concurrency: n, ShutdownGrace: -1}, first)
	b.packOf(t, "g", n)
	b.results.wait(t, "g", "j0")
	<-blocked
	<-blocked

	c := newCalls()
	second := processor.NewMux()
	second.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	runWorker(t, b, worker.Config{Concurrency: n}, second)
	stopFirst() // no grace: the running jobs are cancelled and the pack handed back

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n || info.Done != n || info.Failed != 0 {
		t.Fatalf("group = %+v, want each job counted once", info.GroupCounts)
	}
	if runs := c.count(key("g", "j0")); runs != 0 {
		t.Errorf("the finished j0 ran %d times again, want it dropped as stale", runs)
	}
	for _, jid := range []string{"j1", "j2"} {
		if runs := c.count(key("g", jid)); runs != 1 {
			t.Errorf("%s ran %d times in the second worker, want once", jid, runs)
		}
	}
	for _, jid := range []string{"j0", "j1", "j2"} {
		b.results.wait(t, "g", jid) // the collector keeps a result just after recording it
		if rs := b.results.of("g", jid); len(rs) != 1 || rs[0].Outcome != redisq.Recorded {
			t.Errorf("%s: %d results, want one, recorded", jid, len(rs))
		}
	}
	if d := b.jobResults("t", telemetry.StatusDropped); d != 1 {
		t.Errorf("job_results{t,DROPPED} = %d, want the finished j0 dropped on redelivery", d)
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
}
