package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func setupQueue(t *testing.T) (*redisq.Queue, context.Context) {
	t.Helper()
	env := testenv.Redis(t)
	ctx := context.Background()
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Alpha: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return q, ctx
}

func enqueue(t *testing.T, q *redisq.Queue, gid string, n int, p contracts.Priority) {
	t.Helper()
	var jobs []redisq.Job
	for i := 1; i <= n; i++ {
		jobs = append(jobs, redisq.Job{GroupID: gid, ID: strconv.Itoa(i), Type: "noop", Priority: p})
	}
	if _, err := q.EnqueueJobs(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

func TestStatusPositionAcrossLevels(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	enqueue(t, q, "n1", 3, contracts.PriorityNormal)
	enqueue(t, q, "n2", 2, contracts.PriorityNormal)
	enqueue(t, q, "h1", 1, contracts.PriorityHigh)
	enqueue(t, q, "l1", 1, contracts.PriorityLow)

	for gid, want := range map[string]int64{"h1": 1, "n1": 2, "n2": 3, "l1": 4} {
		s, err := cli.Status(ctx, q, gid)
		if err != nil {
			t.Fatal(err)
		}
		if s.Position != want || s.Waiting != 4 {
			t.Errorf("%s: position %d of %d, want %d of 4", gid, s.Position, s.Waiting, want)
		}
	}

	s, err := cli.Status(ctx, q, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != contracts.StateCreated || s.Jobs != 2 || s.Pending != 2 || s.Declared != -1 || s.Target() != 2 {
		t.Errorf("n2 = %+v", s)
	}
	if s.Rate != 0 || s.ETASeconds != -1 {
		t.Errorf("n2 has no rate yet: rate %v, ETA %v; want no ETA without a rate", s.Rate, s.ETASeconds)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"groupId": "n2", "state": "CREATED", "status": "CREATED", "priorityLevel": "normal",
		"totalJobs": 2.0, "jobs": 2.0, "pending": 2.0, "position": 3.0, "waitingGroups": 4.0,
		"total": nil, "congestionLevel": "NONE",
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("json %s = %v (present %v), want %v", k, got, ok, want)
		}
	}
}

func TestStatusCompletedCounts(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	enqueue(t, q, "g", 3, contracts.PriorityNormal)
	enqueue(t, q, "other", 1, contracts.PriorityNormal)
	if _, err := q.Seal(ctx, "g", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, 10); err != nil {
		t.Fatal(err)
	}
	var rs []contracts.JobResult
	for i, st := range []contracts.ResultStatus{contracts.ResultSuccess, contracts.ResultFailed, contracts.ResultSuccess} {
		rs = append(rs, contracts.JobResult{V: 1, GroupID: "g", JobID: strconv.Itoa(i + 1), Attempt: 1, Status: st})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	s, err := cli.Status(ctx, q, "g")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != contracts.StateCompleted || s.Done != 3 || s.Succeeded != 2 || s.Failed != 1 || s.Declared != 3 {
		t.Errorf("g = %+v", s)
	}
	if !s.Ended() || s.Position != 0 || s.ETASeconds != 0 || s.StartedAt.IsZero() || s.FinishedAt.IsZero() {
		t.Errorf("ended group: ended %v position %d eta %v started %v finished %v", s.Ended(), s.Position, s.ETASeconds, s.StartedAt, s.FinishedAt)
	}
	b, _ := json.Marshal(s)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["position"] != nil || m["total"] != 3.0 || m["succeeded"] != 2.0 || m["failed"] != 1.0 || m["etaSeconds"] != 0.0 {
		t.Errorf("json = %s", b)
	}

	if _, err := cli.Status(ctx, q, "missing"); !errors.Is(err, cli.ErrGroupNotFound) {
		t.Errorf("missing group: err = %v, want ErrGroupNotFound", err)
	}
	if _, err := cli.Status(ctx, q, "bad id"); err == nil || errors.Is(err, cli.ErrGroupNotFound) {
		t.Errorf("invalid id: err = %v, want a validation error", err)
	}
}

func TestSinceRateAndETA(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := &cli.GroupStatus{State: contracts.StateRunning, Declared: 100, Done: 10, At: t0, Rate: 1}
	cur := &cli.GroupStatus{State: contracts.StateRunning, Declared: 100, Done: 30, Cancelled: 5, At: t0.Add(2 * time.Second), Rate: 1}
	got := cur.Since(prev)
	if got.Rate != 10 || got.ETASeconds != 7 { // (100-30-5)/10 = 6.5 -> 7
		t.Errorf("Since: rate %v eta %v, want 10 and 7", got.Rate, got.ETASeconds)
	}
	if cur.Rate != 1 {
		t.Error("Since changed its receiver")
	}
	if cur.Since(nil) != cur || cur.Since(cur) != cur {
		t.Error("Since without an earlier reading must return the reading")
	}
	stalled := &cli.GroupStatus{State: contracts.StateRunning, Declared: 100, Done: 10, At: t0.Add(time.Second)}
	if s := stalled.Since(prev); s.Rate != 0 || s.ETASeconds != -1 {
		t.Errorf("no progress: rate %v eta %v, want 0 and -1 (unknown)", s.Rate, s.ETASeconds)
	}
}
