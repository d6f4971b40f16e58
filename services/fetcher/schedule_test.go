package fetcher_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// TestRedisRestoredFromAnOlderSnapshotKeepsSchedules: groups with a
// notBefore and with sending windows, submitted after the snapshot a Redis
// comes back from, get their schedule back from SUBMIT's replay: still
// held, for the same reasons and until the same times.
func TestRedisRestoredFromAnOlderSnapshotKeepsSchedules(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "rs:"})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 100}}, e.Deps()))
	c := client.New(e.JS, client.Options{})

	if err := c.Submit(ctx, "a", clientJobs("a", 0, 10)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "rs:")

	// Applied after the snapshot: lost by the restore, then replayed.
	nb := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	now := time.Now().UTC()
	// a window that is not open now: the same hour two days on
	later := now.Add(48 * time.Hour)
	ws := []contracts.Window{{Zone: "Europe/Berlin", Days: []string{contracts.Weekdays[later.In(berlin(t)).Weekday()]},
		From: later.In(berlin(t)).Format("15") + ":00", To: later.In(berlin(t)).Add(time.Hour).Format("15") + ":00"}}
	if ws[0].To == "00:00" {
		ws[0].To = "24:00"
	}
	if err := c.SubmitGroup(ctx, "scheduled", contracts.GroupSettings{NotBefore: nb.Format(time.RFC3339Nano)}, clientJobs("scheduled", 0, 5)...); err != nil {
		t.Fatal(err)
	}
	if err := c.SubmitGroup(ctx, "windowed", contracts.GroupSettings{Windows: ws}, clientJobs("windowed", 0, 5)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	want := map[string]redisq.Schedule{}
	for _, g := range []string{"scheduled", "windowed"} {
		sc, err := e.Queue.GroupSchedule(ctx, grp(g))
		if err != nil || sc.Reason == "" {
			t.Fatalf("%s before the restore: %+v %v, want held", g, sc, err)
		}
		want[g] = sc
	}

	restoreSnapshot(t, srv, snap)
	if _, ok, _ := e.Queue.Group(ctx, grp("scheduled")); ok {
		t.Fatal("the restore kept a group submitted after the snapshot")
	}
	// Something to ingest after the restore: the fetcher sees the restart.
	if err := c.Submit(ctx, "d", clientJobs("d", 0, 1)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the groups replayed", 0, func() bool {
		for _, g := range []string{"scheduled", "windowed"} {
			if info, ok, err := e.Queue.Group(ctx, grp(g)); err != nil || !ok || info.Jobs != 5 {
				return false
			}
		}
		return true
	})
	// (the replay ends by making the position current)
	testkit.WaitFor(t, "the position current", 0, func() bool {
		p, err := e.Queue.Position(ctx, "submit")
		return err == nil && p.Current
	})
	for g, w := range want {
		sc, err := e.Queue.GroupSchedule(ctx, grp(g))
		if err != nil || sc.Reason != w.Reason || !sc.HeldUntil.Equal(w.HeldUntil) || !sc.NotBefore.Equal(w.NotBefore) ||
			!reflect.DeepEqual(sc.Windows, w.Windows) {
			t.Errorf("%s after the replay: %+v %v, want %+v", g, sc, err, w)
		}
		if info, _, _ := e.Queue.Group(ctx, grp(g)); info.State != contracts.StateCreated || info.Done != 0 {
			t.Errorf("%s after the replay: state %s, %d done: it started", g, info.State, info.Done)
		}
	}
	if dl := deadLetters(t, e); len(dl) != 0 {
		t.Errorf("dead letters %v, want none", dl)
	}
}

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := contracts.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestRescheduleOverNATS: a schedule message moves a waiting group's
// notBefore (here to now: it starts); one for a started group is a notice
// and changes nothing; a bad one is dead-lettered naming the field.
func TestRescheduleOverNATS(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 100}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := c.SubmitGroup(ctx, "g", contracts.GroupSettings{NotBefore: later.Format(time.RFC3339Nano)}, clientJobs("g", 0, 3)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "held until its notBefore", 0, func() bool {
		sc, err := e.Queue.GroupSchedule(ctx, grp("g"))
		return err == nil && sc.Reason == redisq.HoldScheduled && sc.HeldUntil.Equal(later)
	})
	sooner := time.Now().Add(300 * time.Millisecond)
	if err := c.Reschedule(ctx, "g", sooner); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "started at the new notBefore", 10*time.Second, func() bool {
		info, ok, err := e.Queue.Group(ctx, grp("g"))
		return err == nil && ok && info.StartedAtMs > 0
	})
	info, _, _ := e.Queue.Group(ctx, grp("g"))
	if started := time.UnixMilli(info.StartedAtMs); started.Before(sooner.Truncate(time.Millisecond)) {
		t.Fatalf("started at %v, before the new notBefore %v", started, sooner)
	}
	if err := c.Reschedule(ctx, "g", later); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the late move counted", 10*time.Second, func() bool {
		return testkit.Value(t, e.Metrics.ControlMessages.WithLabelValues("schedule", string(redisq.ControlStarted))) == 1
	})
	if sc, _ := e.Queue.GroupSchedule(ctx, grp("g")); !sc.NotBefore.Equal(sooner.Truncate(time.Millisecond)) {
		t.Fatalf("a move after the start changed notBefore to %v", sc.NotBefore)
	}
}

// TestBadScheduleIsDeadLettered: a jobs message with a window in an unknown
// time zone, a callbackUrl that is not http(s) or a notBefore without its
// offset, or a schedule message without a notBefore, is dead-lettered as
// invalid_field naming the field and the limit; nothing is stored.
func TestBadScheduleIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 100}}, e.Deps()))
	for _, body := range []string{
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"windows":[{"zone":"Mars/Olympus","days":["mon"],"from":"09:00","to":"17:00"}]}}`,
		`{"v":2,"kind":"schedule"}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"callbackUrl":"ftp://hooks.example.com/done"}}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"notBefore":"2026-11-27T09:00:00"}}`,
	} {
		m := nats.NewMsg(e.Names.Submit(grp("bad")))
		m.Data = []byte(body)
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var dl []deadLetter
	testkit.WaitFor(t, "four dead letters", 10*time.Second, func() bool { dl = deadLetters(t, e); return len(dl) == 4 })
	for i, want := range []string{"group.windows[0].zone", "notBefore", "group.callbackUrl", "group.notBefore"} {
		if dl[i].Reason != contracts.ReasonInvalidField || !strings.Contains(dl[i].Error, want) {
			t.Errorf("dead letter %d: %s %q, want invalid_field naming %s", i, dl[i].Reason, dl[i].Error, want)
		}
	}
	if !strings.Contains(dl[0].Error, "IANA") {
		t.Errorf("dead letter %q does not say the limit", dl[0].Error)
	}
	if _, ok, _ := e.Queue.Group(ctx, grp("bad")); ok {
		t.Error("a refused message stored its group")
	}
}

// TestRedisRestoredFromAnOlderSnapshotAdmitsNothingBeforeTheReplay: a
// group's start is moved later after the snapshot a Redis comes back from,
// and its first notBefore has passed by then. The restored Redis holds the
// first one only, until SUBMIT's replay applies the move again: admission
// waits for the replay, so the group does not start, and keeps the moved
// notBefore.
func TestRedisRestoredFromAnOlderSnapshotAdmitsNothingBeforeTheReplay(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "ra:"})
	ctx := context.Background()
	// admission looks at the queue every 20 ms, the position is checked
	// every second: admission comes first after the restore
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 100}, MaxIdle: 20 * time.Millisecond}, e.Deps()))
	c := client.New(e.JS, client.Options{})

	first := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	if err := c.SubmitGroup(ctx, "g", contracts.GroupSettings{NotBefore: first.Format(time.RFC3339Nano)}, clientJobs("g", 0, 5)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "ra:")

	moved := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := c.Reschedule(ctx, "g", moved); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the move applied", 0, func() bool {
		sc, err := e.Queue.GroupSchedule(ctx, grp("g"))
		return err == nil && sc.NotBefore.Equal(moved)
	})
	waitPosition(t, e)
	time.Sleep(time.Until(first.Add(100 * time.Millisecond)))

	restoreSnapshot(t, srv, snap)
	testkit.WaitFor(t, "the position current", 0, func() bool {
		p, err := e.Queue.Position(ctx, "submit")
		return err == nil && p.Current
	})
	time.Sleep(200 * time.Millisecond) // a few admission rounds
	info, ok, err := e.Queue.Group(ctx, grp("g"))
	if err != nil || !ok {
		t.Fatalf("group: %v %v", ok, err)
	}
	if info.StartedAtMs > 0 || info.State != contracts.StateCreated {
		t.Errorf("the group started (%s, startedAt %d) at its first notBefore, before the replay moved it", info.State, info.StartedAtMs)
	}
	if sc, _ := e.Queue.GroupSchedule(ctx, grp("g")); !sc.NotBefore.Equal(moved) {
		t.Errorf("notBefore %v after the replay, want the moved %v", sc.NotBefore, moved)
	}
}
