package fetcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// dumpKeys copies every key under prefix (DUMP): what a snapshot of the
// server holds of the queue.
func dumpKeys(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

// TestRedisRestoredFromAnOlderSnapshotGetsSubmitBack restarts Redis from a
// snapshot taken before part of the submissions were applied (and
// acknowledged): the fetcher replays SUBMIT from the position the snapshot
// holds, so every job, seal and pause is there again, nothing is
// dead-lettered, and what is submitted afterwards is applied as usual.
func TestRedisRestoredFromAnOlderSnapshotGetsSubmitBack(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "rb:"})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 1}}, e.Deps()))
	c := client.New(e.JS, client.Options{})

	for _, g := range []string{"a", "b"} {
		if err := c.Submit(ctx, g, clientJobs(g, 0, 250)...); err != nil {
			t.Fatal(err)
		}
	}
	waitSubmitDrained(t, e)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "rb:")

	// Applied and acknowledged after the snapshot: lost by the restore.
	if err := c.Submit(ctx, "a", clientJobs("a", 250, 400)...); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, "c", clientJobs("c", 0, 120)...); err != nil {
		t.Fatal(err)
	}
	if err := c.Seal(ctx, "b", 250); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	testkit.WaitFor(t, "group c paused", 0, func() bool { return groupInfo(t, e, grp("c")).State == contracts.StatePaused })

	// The fetcher's next admission round finds the position not current
	// and replays at once, so group a may already be back at 400 by the
	// time it could be read here: that the restore took the four later
	// messages away is shown by the replay counting them (below).
	restoreSnapshot(t, srv, snap)

	// Something to ingest after the restore: the fetcher sees the restart.
	if err := c.Submit(ctx, "d", clientJobs("d", 0, 5)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the restore undone", 0, func() bool {
		a, b, cg, d := groupInfo(t, e, grp("a")), groupInfo(t, e, grp("b")), groupInfo(t, e, grp("c")), groupInfo(t, e, grp("d"))
		return a.Jobs == 400 && b.Declared == 250 && cg.Jobs == 120 && cg.State == contracts.StatePaused && d.Jobs == 5
	})
	// The replay counts a batch once it is stored: wait for the count.
	testkit.WaitFor(t, "the replay counted", 10*time.Second, func() bool {
		return testkit.Value(t, e.Metrics.SubmitReplayed.WithLabelValues("replayed")) >= 4
	})
	if n := testkit.Value(t, e.Metrics.SubmitReplayed.WithLabelValues("purged")); n != 0 {
		t.Errorf("%v messages the replay needed were purged", n)
	}
	if dl := deadLetters(t, e); len(dl) != 0 {
		t.Errorf("dead letters %v, want none", dl)
	}
	p, err := e.Queue.Position(ctx, "submit")
	if err != nil || !p.Current {
		t.Fatalf("position %+v, %v: want current", p, err)
	}
}

// TestReplayWaitsForTheFetcherReplaying: after a restore, a fetcher that
// finds another one replaying (its lease held) does not replay the same
// range too; what it ingests waits for the position to become current, and
// once the lease is free the replay runs once.
func TestReplayWaitsForTheFetcherReplaying(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "rl:"})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 1}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	if err := c.Submit(ctx, "a", clientJobs("a", 0, 100)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "rl:")
	if err := c.Submit(ctx, "a", clientJobs("a", 100, 150)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	// Another fetcher is replaying: its lease is there before the server
	// answers this one, so that this fetcher cannot take it first.
	restoreSnapshot(t, srv, snap, func(p redis.Pipeliner) {
		p.Set(ctx, "rl:lease:submit", "another fetcher", time.Minute)
	})
	if ok, err := e.Queue.TakeLease(ctx, "submit", "another fetcher", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if err := c.Submit(ctx, "d", clientJobs("d", 0, 5)...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a replay of its own would take milliseconds
	if a, d := groupInfo(t, e, grp("a")), groupInfo(t, e, grp("d")); a.Jobs != 100 || d.Jobs != 0 {
		t.Fatalf("while another fetcher held the replay: a has %d jobs (want the snapshot's 100), d %d (want 0: waiting)", a.Jobs, d.Jobs)
	}
	if n := testkit.Value(t, e.Metrics.SubmitReplayed.WithLabelValues("replayed")); n != 0 {
		t.Fatalf("%v messages replayed under another fetcher's lease", n)
	}
	// The other fetcher died: its lease runs out (released here).
	if err := e.Queue.ReleaseLease(ctx, "submit", "another fetcher"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the replay, then d", 0, func() bool {
		a, d := groupInfo(t, e, grp("a")), groupInfo(t, e, grp("d"))
		return a.Jobs == 150 && d.Jobs == 5
	})
	waitPosition(t, e)
}

// waitPosition waits until SUBMIT's position in Redis covers every message
// of SUBMIT.
func waitPosition(t *testing.T, e *pipelinetest.Env) {
	t.Helper()
	st, err := e.JS.Stream(context.Background(), e.Names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "position stored", 0, func() bool {
		p, err := e.Queue.Position(context.Background(), "submit")
		return err == nil && p.Current && p.Seq >= info.State.LastSeq
	})
}

// TestSubmitKeepsAppliedMessagesForTheReplayWindow: applied messages stay
// on SUBMIT for the window, and without a window they are purged once the
// position passes them.
func TestSubmitKeepsAppliedMessagesForTheReplayWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		window time.Duration
		kept   bool
	}{{"default window", 0, true}, {"no window", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := pipelinetest.NewEnv(t, redisq.Config{})
			testkit.Start(t, newFetcher(t, fetcher.Config{ReplayWindow: tc.window}, e.Deps()))
			c := client.New(e.JS, client.Options{})
			for i := range 3 {
				if err := c.Submit(context.Background(), groupName(i), clientJobs(groupName(i), 0, 10)...); err != nil {
					t.Fatal(err)
				}
			}
			waitSubmitDrained(t, e)
			waitPosition(t, e)
			if tc.kept {
				time.Sleep(2 * time.Second) // two checkpoints
				if n := e.StreamMsgs(t, e.Names.StreamSubmit()); n != 3 {
					t.Fatalf("SUBMIT holds %d messages, want the 3 applied ones", n)
				}
				return
			}
			testkit.WaitFor(t, "SUBMIT purged", 0, func() bool { return e.StreamMsgs(t, e.Names.StreamSubmit()) == 0 })
		})
	}
}

// completeReady records a SUCCESS result for each job of jobs, as the
// aggregator would: they leave their tenant's queued jobs.
func completeReady(t *testing.T, e *pipelinetest.Env, jobs []pipelinetest.Msg) {
	t.Helper()
	rs := make([]contracts.JobResult, len(jobs))
	for i, m := range jobs {
		rs[i] = contracts.JobResult{Tenant: m.Job.Tenant, GroupID: m.Job.GroupID, JobID: m.Job.JobID,
			Attempt: m.Job.Attempt, Status: contracts.ResultSuccess}
	}
	if _, err := e.Queue.RecordBatch(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
}

// restoreSnapshot restarts the Redis server with snap and nothing else
// (and what also writes), as a server that starts from a snapshot: it
// loads the snapshot before it answers the fetchers, so they never see it
// empty or half restored, and its run id is new.
func restoreSnapshot(t *testing.T, srv *testenv.RedisServer, snap map[string]string, also ...func(redis.Pipeliner)) {
	t.Helper()
	err := srv.RestartWith(func(ctx context.Context, c *redis.Client) error {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for k, d := range snap {
				p.RestoreReplace(ctx, k, 0, d)
			}
			for _, f := range also {
				f(p)
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplayRestoresAcceptedSubmissionsOverQuota: jobs finished after the
// snapshot leave their tenants below their quotas, so later submissions are
// accepted; the restore brings the finished jobs back and the tenants look
// fuller than they were. The replay stores every accepted submission all
// the same (a queued-jobs quota and an active-groups quota), while a
// submission the quota refused when it was first received stays refused
// and is not dead-lettered again. A submission the replay cannot store (its
// group ended in the restored Redis: the keys of a cancelled group expired
// and the name was used again) is dead-lettered with its reason and counted,
// and only what was stored counts as replayed.
func TestReplayRestoresAcceptedSubmissionsOverQuota(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "rq:"})
	ctx := context.Background()
	if err := e.Queue.SetTenantQuota(ctx, "tq", redisq.QuotaQueuedJobs, 10); err != nil {
		t.Fatal(err)
	}
	if err := e.Queue.SetTenantQuota(ctx, "tg", redisq.QuotaActiveGroups, 1); err != nil {
		t.Fatal(err)
	}
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	reader := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	cq := client.New(e.JS, client.Options{Tenant: "tq"})
	cg := client.New(e.JS, client.Options{Tenant: "tg"})
	cx := client.New(e.JS, client.Options{Tenant: "tx"})
	q1, q2, q3 := contracts.Group("tq", "q1"), contracts.Group("tq", "q2"), contracts.Group("tq", "q3")
	g1, g2 := contracts.Group("tg", "g1"), contracts.Group("tg", "g2")
	x := contracts.Group("tx", "x")

	// Before the snapshot: tq at its 10 queued jobs, tg at its one active
	// group (sealed, its job not finished yet), tx's group x cancelled.
	if err := cq.Submit(ctx, "q1", clientJobs("q1", 0, 10)...); err != nil {
		t.Fatal(err)
	}
	if err := cg.Submit(ctx, "g1", clientJobs("g1", 0, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := cg.Seal(ctx, "g1", 1); err != nil {
		t.Fatal(err)
	}
	if err := cx.Submit(ctx, "x", clientJobs("x", 0, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := cx.Cancel(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	running := reader.WaitJobs(t, 11, 0)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "rq:")

	// After it: the jobs finish, the tenants have room again and their new
	// submissions are accepted; x's keys expire and x is used again.
	completeReady(t, e, running)
	testkit.WaitFor(t, "g1 completed", 0, func() bool { return groupInfo(t, e, g1).State == contracts.StateCompleted })
	if err := cq.Submit(ctx, "q2", clientJobs("q2", 0, 10)...); err != nil {
		t.Fatal(err)
	}
	if err := cg.Submit(ctx, "g2", clientJobs("g2", 0, 3)...); err != nil {
		t.Fatal(err)
	}
	if err := cq.Submit(ctx, "q3", clientJobs("q3", 0, 1)...); err != nil { // over tq's quota: refused
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "rq:*:tx:x:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of x: %v %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cx.Submit(ctx, "x", clientJobs("x", 1, 3)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	if a, b, c, d := groupInfo(t, e, q2).Jobs, groupInfo(t, e, g2).Jobs, groupInfo(t, e, q3).State, groupInfo(t, e, x).Jobs; a != 10 || b != 3 || c != "" || d != 2 {
		t.Fatalf("before the restore: q2 %d jobs, g2 %d, q3 %q, x %d; want 10, 3, no group, 2", a, b, c, d)
	}
	dls := deadLetters(t, e)
	if len(dls) != 1 || dls[0].Reason != fetcher.ReasonOverQuota {
		t.Fatalf("dead letters before the restore %+v, want q3's over_quota", dls)
	}

	// The next checkpoint finds the position not current and replays.
	restoreSnapshot(t, srv, snap)
	testkit.WaitFor(t, "the replay done", 0, func() bool {
		p, err := e.Queue.Position(ctx, "submit")
		return err == nil && p.Current
	})

	// Every accepted job is back.
	if n := groupInfo(t, e, q1).Jobs; n != 10 {
		t.Errorf("q1 has %d jobs after the replay, want the snapshot's 10", n)
	}
	if n := groupInfo(t, e, q2).Jobs; n != 10 {
		t.Errorf("q2 has %d jobs after the replay, want the 10 accepted", n)
	}
	if n := groupInfo(t, e, g2).Jobs; n != 3 {
		t.Errorf("g2 has %d jobs after the replay, want the 3 accepted", n)
	}
	for _, g := range []contracts.GroupRef{q2, g2} {
		if h, _ := redisq.ReadJob(ctx, rdb, e.Keys, g, jobID(0)); len(h) == 0 {
			t.Errorf("job %s of %s not stored", jobID(0), g)
		}
	}
	// The refused one stays refused, and is not dead-lettered twice.
	if st := groupInfo(t, e, q3).State; st != "" {
		t.Errorf("q3, refused when received, exists after the replay (%s)", st)
	}
	dls = deadLetters(t, e)
	var reasons []string
	for _, dl := range dls {
		reasons = append(reasons, dl.Reason+" "+dl.Subject)
	}
	// What the replay could not store is dead-lettered with its reason.
	if len(dls) != 2 || dls[1].Reason != fetcher.ReasonGroupEnded || dls[1].Subject != e.Names.Submit(x) {
		t.Errorf("dead letters %v, want q3's over_quota and x's group_ended", reasons)
	}
	for o, want := range map[string]float64{"replayed": 2, "dead_lettered": 1, "rejected_before": 1, "purged": 0} {
		if n := testkit.Value(t, e.Metrics.SubmitReplayed.WithLabelValues(o)); n != want {
			t.Errorf("replay outcome %s counted %v, want %v", o, n, want)
		}
	}
	for tenant, want := range map[string][2]int64{"tq": {20, 2}, "tg": {4, 2}} {
		tq, err := e.Queue.TenantQuota(ctx, tenant)
		if err != nil || tq.QueuedJobs != want[0] || tq.ActiveGroups != want[1] {
			t.Errorf("tenant %s: %+v %v, want %d queued jobs and %d active groups counted", tenant, tq, err, want[0], want[1])
		}
	}
}
