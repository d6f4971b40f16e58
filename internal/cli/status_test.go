package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

func setupQueue(t *testing.T) (*redisq.Queue, context.Context) {
	t.Helper()
	q, _, ctx := setupRaw(t)
	return q, ctx
}

// raw is the Redis a test's queue is on, with the queue's key names.
type raw struct {
	rdb  *redis.Client
	keys redisq.Keys
}

// setupRaw is setupQueue with the Redis the queue is on and the queue's key
// names, for a test that reads or writes raw state no method of the queue
// reads or writes.
func setupRaw(t *testing.T) (*redisq.Queue, raw, context.Context) {
	t.Helper()
	env := testenv.Redis(t)
	ctx := context.Background()
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Alpha: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return q, raw{rdb: env.Client, keys: redisq.NewKeys(env.Prefix)}, ctx
}

func enqueue(t *testing.T, q *redisq.Queue, g contracts.GroupRef, n int, p contracts.Priority) {
	t.Helper()
	var jobs []redisq.Job
	for i := 1; i <= n; i++ {
		jobs = append(jobs, redisq.Job{Group: g, ID: strconv.Itoa(i), Type: "noop", Priority: p})
	}
	if _, err := q.EnqueueJobs(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

func ref(tenant, id string) contracts.GroupRef { return contracts.Group(tenant, id) }

// Position is a group's place among its tenant's waiting groups at its
// level; TenantPosition its tenant's place among the waiting tenants, every
// tenant waiting at a higher level first.
func TestStatusPositionAcrossLevels(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	enqueue(t, q, ref("acme", "n1"), 3, contracts.PriorityNormal)
	enqueue(t, q, ref("acme", "n2"), 2, contracts.PriorityNormal)
	enqueue(t, q, ref("acme", "h1"), 1, contracts.PriorityHigh)
	// globex uses acme's group id n1: another group.
	enqueue(t, q, ref("globex", "n1"), 1, contracts.PriorityNormal)
	enqueue(t, q, ref("globex", "l1"), 1, contracts.PriorityLow)

	// Levels: high {acme: h1}, normal {acme: n1 n2, globex: n1} (the two
	// tenants entered the level at the same virtual time: equal scores are
	// ordered by name), low {globex: l1}.
	for _, w := range []struct {
		g              contracts.GroupRef
		pos, tenantPos int64
	}{
		{ref("acme", "h1"), 1, 1},
		{ref("acme", "n1"), 1, 2},
		{ref("acme", "n2"), 2, 2},
		{ref("globex", "n1"), 1, 3},
		{ref("globex", "l1"), 1, 4},
	} {
		s, err := status.Read(ctx, q, w.g, status.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Tenant != w.g.Tenant || s.GroupID != w.g.ID {
			t.Errorf("%s: status names %s/%s", w.g, s.Tenant, s.GroupID)
		}
		if s.Position != w.pos || s.TenantPosition != w.tenantPos || s.WaitingGroups != 5 || s.WaitingTenants != 4 {
			t.Errorf("%s: group position %d, tenant position %d of %d tenants, %d groups waiting; want %d, %d of 4, 5",
				w.g, s.Position, s.TenantPosition, s.WaitingTenants, s.WaitingGroups, w.pos, w.tenantPos)
		}
	}

	s, err := status.Read(ctx, q, ref("acme", "n2"), status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != contracts.StateCreated || s.Jobs != 2 || s.Queued != 2 || s.Total != -1 || s.Target() != 2 {
		t.Errorf("n2 = %+v", s)
	}
	if s.Rate != 0 || s.ETASeconds != -1 {
		t.Errorf("n2 has no rate yet: rate %v, ETA %v; want no ETA without a rate", s.Rate, s.ETASeconds)
	}
	if other, err := status.Read(ctx, q, ref("globex", "n1"), status.Options{}); err != nil || other.Jobs != 1 {
		t.Errorf("globex/n1: %v, %+v; want its own group of 1 job", err, other)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// The JSON is the API's view: counts at the top, the live part under
	// "status".
	for k, want := range map[string]any{
		"tenant": "acme", "groupId": "n2", "state": "CREATED", "priority": "normal",
		"jobs": 2.0, "queued": 2.0, "total": nil,
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("json %s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	live, _ := m["status"].(map[string]any)
	for k, want := range map[string]any{
		"position": 2.0, "tenantPosition": 2.0, "waitingGroups": 5.0, "waitingTenants": 4.0, "congestion": "NONE",
	} {
		if got, ok := live[k]; !ok || got != want {
			t.Errorf("json status.%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
}

func TestStatusCompletedCounts(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	g := ref("acme", "g")
	enqueue(t, q, g, 3, contracts.PriorityNormal)
	enqueue(t, q, ref("acme", "other"), 1, contracts.PriorityNormal)
	if _, err := q.Seal(ctx, g, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, 10); err != nil {
		t.Fatal(err)
	}
	var rs []contracts.JobResult
	for i, st := range []contracts.ResultStatus{contracts.ResultSuccess, contracts.ResultFailed, contracts.ResultSuccess} {
		rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: strconv.Itoa(i + 1), Attempt: 1, Status: st})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != contracts.StateCompleted || s.Done != 3 || s.Succeeded != 2 || s.Failed != 1 || s.Total != 3 {
		t.Errorf("g = %+v", s)
	}
	if !s.Ended() || s.Position != 0 || s.TenantPosition != 0 || s.ETASeconds != 0 || s.StartedAt.IsZero() || s.FinishedAt.IsZero() {
		t.Errorf("ended group: ended %v position %d/%d eta %v started %v finished %v",
			s.Ended(), s.Position, s.TenantPosition, s.ETASeconds, s.StartedAt, s.FinishedAt)
	}
	b, _ := json.Marshal(s)
	var m struct {
		Total, Succeeded, Failed float64
		Status                   map[string]any
	}
	_ = json.Unmarshal(b, &m)
	if m.Status["position"] != nil || m.Status["tenantPosition"] != nil || m.Total != 3 || m.Succeeded != 2 || m.Failed != 1 || m.Status["etaSeconds"] != 0.0 {
		t.Errorf("json = %s", b)
	}

	if _, err := status.Read(ctx, q, ref("acme", "missing"), status.Options{}); !errors.Is(err, status.ErrNotFound) {
		t.Errorf("missing group: err = %v, want ErrNotFound", err)
	}
	// The group exists for acme only.
	if _, err := status.Read(ctx, q, ref("globex", "g"), status.Options{}); !errors.Is(err, status.ErrNotFound) {
		t.Errorf("another tenant's group: err = %v, want ErrNotFound", err)
	}
	for _, bad := range []contracts.GroupRef{ref("acme", "bad id"), ref("a.b", "g"), ref("", "g")} {
		if _, err := status.Read(ctx, q, bad, status.Options{}); err == nil || errors.Is(err, status.ErrNotFound) {
			t.Errorf("%q: err = %v, want a validation error", bad, err)
		}
	}
}

// A paused group is not waiting (no position) and keeps its place: resumed,
// it is ahead of the group that came after it again.
func TestStatusPausedKeepsItsPlace(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	p, o := ref("acme", "p"), ref("acme", "o")
	enqueue(t, q, p, 3, contracts.PriorityNormal)
	enqueue(t, q, o, 1, contracts.PriorityNormal)
	if r, err := q.Pause(ctx, p); err != nil || r.Outcome != redisq.Paused {
		t.Fatalf("pause: %+v, %v", r, err)
	}
	s, err := status.Read(ctx, q, p, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != contracts.StatePaused || s.Position != 0 || s.TenantPosition != 0 || s.Queued != 3 || s.WaitingGroups != 1 {
		t.Errorf("paused: state %s position %d/%d pending %d waiting %d; want PAUSED, no position, 3 pending, 1 group waiting",
			s.State, s.Position, s.TenantPosition, s.Queued, s.WaitingGroups)
	}
	if s, err := status.Read(ctx, q, o, status.Options{}); err != nil || s.Position != 1 {
		t.Errorf("the other group while p is paused: %v, position %d, want 1", err, s.Position)
	}
	if r, err := q.Resume(ctx, p); err != nil || r.Outcome != redisq.Resumed {
		t.Fatalf("resume: %+v, %v", r, err)
	}
	for g, want := range map[contracts.GroupRef]int64{p: 1, o: 2} {
		s, err := status.Read(ctx, q, g, status.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s.State != contracts.StateCreated || s.Position != want || s.WaitingGroups != 2 {
			t.Errorf("%s after resume: state %s position %d of %d, want CREATED %d of 2", g, s.State, s.Position, s.WaitingGroups, want)
		}
	}
}

// Status reports the in-flight limit the group was created with, and the
// jobs admitted under it.
func TestStatusMaxInFlight(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	g := ref("acme", "lim")
	var jobs []redisq.Job
	for i := 1; i <= 5; i++ {
		jobs = append(jobs, redisq.Job{Group: g, ID: strconv.Itoa(i), Type: "noop", MaxInFlight: 2})
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	r, err := q.Admit(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %d jobs, want the limit of 2", len(r.Jobs))
	}
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxInFlight != 2 || s.InFlight != 2 || s.Queued != 3 {
		t.Errorf("status: max in flight %d, in flight %d, pending %d; want 2, 2, 3", s.MaxInFlight, s.InFlight, s.Queued)
	}
	b, _ := json.Marshal(s)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["maxInFlight"] != 2.0 || m["inFlight"] != 2.0 {
		t.Errorf("json = %s", b)
	}
}

func TestSinceRateAndETA(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := &status.Group{State: contracts.StateRunning, Total: 100, Jobs: 100, Queued: 90, Done: 10, At: t0, Rate: 1}
	cur := &status.Group{State: contracts.StateRunning, Total: 100, Jobs: 100, Queued: 65, Done: 30, Cancelled: 5, At: t0.Add(2 * time.Second), Rate: 1}
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
	stalled := &status.Group{State: contracts.StateRunning, Total: 100, Jobs: 100, Queued: 90, Done: 10, At: t0.Add(time.Second)}
	if s := stalled.Since(prev); s.Rate != 0 || s.ETASeconds != -1 {
		t.Errorf("no progress: rate %v eta %v, want 0 and -1 (unknown)", s.Rate, s.ETASeconds)
	}
}
