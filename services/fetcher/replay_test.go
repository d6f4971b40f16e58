package fetcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	testkit.Start(t, newFetcher(t, fetcher.Config{ReadyCapacity: 1}, e.Deps()))
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

	srv.Stop()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for k, d := range snap {
		if err := rdb.RestoreReplace(ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := groupInfo(t, e, grp("a")).Jobs; n != 250 {
		t.Fatalf("group a has %d jobs after the restore, want the snapshot's 250", n)
	}

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
