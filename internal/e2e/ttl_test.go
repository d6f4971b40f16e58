package e2e_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// t9Mux serves "t9": jobs job-<n> with n%7 == 0 fail permanently, n%5 == 0
// fail once with a retryable error, n%11 == 0 are rate limited once; the
// rest succeed. Each run takes about 2 ms.
func t9Mux() *processor.Mux {
	m := processor.NewMux()
	builtin.Register(m, builtin.Options{})
	m.HandleFunc("t9", func(ctx context.Context, job *processor.Job) error {
		time.Sleep(2 * time.Millisecond)
		n, _ := strconv.Atoi(strings.TrimPrefix(job.JobID, "job-"))
		switch {
		case n%7 == 0:
			return processor.Permanent(errors.New("invalid recipient"))
		case n%5 == 0 && job.Attempt == 1:
			return errors.New("downstream hiccup")
		case n%11 == 0 && job.Attempt == 1:
			return processor.RateLimited(50*time.Millisecond, errors.New("429"))
		}
		return nil
	})
	return m
}

// Chaos check T9: after groups complete (with failures, retries and
// throttles), are cancelled mid-run or before their first job, are paused
// and cancelled, are abandoned unsealed, and after a retry of a group's
// failed jobs (what POST …/retry-failed does), no key of an ended or
// abandoned group is left without a TTL, and the work streams hold no
// unacknowledged message.
func TestT9EndedGroupsLeaveNoKeyWithoutTTL(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(func(c *config.Config) {
		c.GlobalRps = 1000
		c.GroupTTL, c.JobTTL = time.Hour, time.Hour
	})
	r := e.start(cfg, stack.PipelineTargets, t9Mux())
	q := r.st.Conns.Queue
	ctx := context.Background()

	// Completed, with failures, retries and throttles.
	e.submit("done", "t9", 300, `{}`, "")

	// Cancelled mid-run, some of its jobs backing off.
	const victim = 3000
	e.submit("victim", "t9", victim, `{}`, "")
	testkit.WaitFor(t, "victim progress", 60*time.Second, func() bool {
		info, ok, _ := q.Group(ctx, ref("victim"))
		return ok && info.Done >= 100
	})
	if err := e.client.Cancel(ctx, "victim"); err != nil {
		t.Fatal(err)
	}

	// Cancelled before its first job: the jobs that follow are dead-lettered.
	if err := e.client.Cancel(ctx, "precancelled"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Submit(ctx, "precancelled", client.Job{ID: "job-000001", Type: "t9", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}

	// Paused with jobs held, then cancelled.
	if err := e.client.Pause(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	e.submit("paused", "t9", 20, `{}`, "")
	if err := e.client.Cancel(ctx, "paused"); err != nil {
		t.Fatal(err)
	}

	// Unsealed: every job done, then abandoned as the aggregator's idle
	// check would after GROUP_IDLE_TTL.
	idle := make([]client.Job, 30)
	for i := range idle {
		idle[i] = client.Job{ID: "job-" + strconv.Itoa(100+i), Type: "t9", Payload: []byte(`{}`)}
	}
	if err := e.client.Submit(ctx, "idle", idle...); err != nil {
		t.Fatal(err)
	}

	for gid, want := range map[string]contracts.GroupState{"done": contracts.StateCompleted, "victim": contracts.StateCancelled,
		"precancelled": contracts.StateCancelled, "paused": contracts.StateCancelled} {
		if ev := e.wait(gid, 2*time.Minute); ev.State != want {
			t.Fatalf("group %s ended %s, want %s", gid, ev.State, want)
		}
	}
	testkit.WaitFor(t, "victim counts to settle", 60*time.Second, func() bool {
		info := group(t, q, "victim")
		return info.Succeeded+info.Failed+info.Cancelled == victim
	})
	testkit.WaitFor(t, "idle group's jobs done", 60*time.Second, func() bool {
		info, ok, _ := q.Group(ctx, ref("idle"))
		return ok && info.Done == int64(len(idle))
	})
	time.Sleep(5 * time.Millisecond)
	if got, err := q.AbandonIdle(ctx, time.Millisecond); err != nil || len(got) != 1 || got[0] != ref("idle") {
		t.Fatalf("abandoned %v (%v), want the idle group", got, err)
	}

	// Retry of the completed group's failed jobs, linked to it.
	fs, _, err := q.Failures(ctx, ref("done"), "", redisq.MaxFailuresPage)
	if err != nil || len(fs) == 0 {
		t.Fatalf("failures of done: %d %v", len(fs), err)
	}
	retry := make([]client.Job, len(fs))
	for i, f := range fs {
		retry[i] = client.Job{ID: f.JobID, Type: f.Type, Payload: f.Payload}
	}
	if err := e.client.Submit(ctx, "done-retry-1", retry...); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Seal(ctx, "done-retry-1", int64(len(retry))); err != nil {
		t.Fatal(err)
	}
	if err := q.LinkRetry(ctx, ref("done"), ref("done-retry-1"), 2*cfg.GroupTTL); err != nil {
		t.Fatal(err)
	}
	if ev := e.wait("done-retry-1", time.Minute); ev.State != contracts.StateCompleted || ev.Failed != int64(len(fs)) {
		t.Fatalf("retry group: %+v", ev)
	}

	pipelinetest.WaitWorkStreamsEmpty(t, e.js, contracts.Names{Prefix: cfg.SubjectPrefix}, 30*time.Second)
	pipelinetest.CheckGroupTTLs(t, r.st.Conns.Redis, e.prefix)
}

// With KEEP_SUCCEEDED_JOBS=false a group's succeeded jobs leave Redis as
// their results are recorded, and nothing else changes: the counts are
// exact (failures, retries and throttles included), the failed jobs are
// listed, a succeeded job sent again changes nothing, and the ended
// group's keys get their TTLs.
func TestDroppedSucceededJobsKeepCountsExact(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(func(c *config.Config) {
		c.GlobalRps = 1000
		c.KeepSucceededJobs = false
	})
	r := e.start(cfg, stack.PipelineTargets, t9Mux())
	q, rdb := r.st.Conns.Queue, r.st.Conns.Redis
	ctx := context.Background()

	const n = 700
	e.submit("drop", "t9", n, `{}`, "")
	ev := e.wait("drop", 2*time.Minute)
	failed := int64(0)
	for i := 0; i < n; i++ {
		if i%7 == 0 {
			failed++
		}
	}
	if ev.State != contracts.StateCompleted || ev.Failed != failed || ev.Succeeded != n-failed {
		t.Fatalf("group ended %+v; want COMPLETED with %d failed and %d succeeded", ev, failed, n-failed)
	}
	jobs, err := rdb.Keys(ctx, e.prefix+"job:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(jobs)) != failed {
		t.Errorf("%d job hashes left, want the %d failed jobs' alone", len(jobs), failed)
	}
	fs, _, err := q.Failures(ctx, ref("drop"), "", redisq.MaxFailuresPage)
	if err != nil || int64(len(fs)) != failed || fs[0].Type != "t9" {
		t.Errorf("failures listing: %d entries (%v), want %d", len(fs), err, failed)
	}

	// a succeeded job sent again: the counts do not move
	if err := e.client.Submit(ctx, "drop", client.Job{ID: "job-000001", Type: "t9", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if info := group(t, q, "drop"); info.Jobs != n || info.Succeeded != n-failed {
		t.Errorf("after a succeeded job was sent again: %d jobs, %d succeeded", info.Jobs, info.Succeeded)
	}
	pipelinetest.WaitWorkStreamsEmpty(t, e.js, contracts.Names{Prefix: cfg.SubjectPrefix}, 30*time.Second)
	pipelinetest.CheckGroupTTLs(t, r.st.Conns.Redis, e.prefix)
}
