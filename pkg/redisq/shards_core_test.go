package redisq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// tenantsOnShards names one tenant on each of n shards, in shard order.
func tenantsOnShards(n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		t := fmt.Sprintf("tenant%d", i)
		if s := redisq.ShardOf(t, n); out[s] == "" {
			out[s] = t
			found++
		}
	}
	return out
}

func TestShardOfIsStableAndSpreads(t *testing.T) {
	if got := redisq.ShardOf("acme", 1); got != 0 {
		t.Fatalf("one shard: %d", got)
	}
	// crc32 of the tenant: fixed for an installation's life
	if got := redisq.ShardOf("acme", 16); got != 14 {
		t.Fatalf("ShardOf(acme, 16) = %d", got)
	}
	counts := make([]int, 16)
	for i := 0; i < 1600; i++ {
		counts[redisq.ShardOf(fmt.Sprintf("t%d", i), 16)]++
	}
	for s, c := range counts {
		if c < 50 || c > 150 {
			t.Fatalf("shard %d has %d of 1600 tenants: %v", s, c, counts)
		}
	}
}

// The whole life of jobs of tenants on four shards, through the Queue
// alone: each tenant's keys are in its shard's slot, admission takes from
// every shard, and claims, starts and results reach the right shard.
func TestShardedQueueRunsJobsOfEveryShard(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 4, GlobalLimit: 100000}, false)
	tenants := tenantsOnShards(4)
	var jobs []redisq.Job
	for _, tn := range tenants {
		for i := 0; i < 5; i++ {
			jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: tn, ID: "g"}, ID: fmt.Sprintf("j%d", i), Type: "t", Payload: []byte(`{}`)})
		}
	}
	res, err := q.EnqueueJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outcomes {
		if o != redisq.Added {
			t.Fatalf("job %d: %v", i, o)
		}
	}
	if len(res.Groups) != 4 || len(res.Created) != 4 {
		t.Fatalf("groups %d, created %d: want 4 and 4", len(res.Groups), len(res.Created))
	}
	for i, g := range res.Groups {
		if g.Group.Tenant != tenants[i] || g.Counts.Jobs != 5 {
			t.Fatalf("group %d: %+v", i, g)
		}
	}
	// a job sent again is a duplicate, on its shard
	if again, err := q.EnqueueJobs(ctx, jobs[:1]); err != nil || again.Outcomes[0] != redisq.Duplicate {
		t.Fatalf("again: %v %v", again, err)
	}
	for i, tn := range tenants {
		key := redisq.ShardPrefix(b.prefix, i) + "group:" + tn + ":g:meta"
		if n, err := b.rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("tenant %s: %s exists %d (%v)", tn, key, n, err)
		}
		if n, _ := b.rdb.Exists(ctx, b.prefix+"group:"+tn+":g:meta").Result(); n != 0 {
			t.Fatalf("tenant %s: a key outside its shard", tn)
		}
	}

	// admission goes through every shard; a call with room for 8 admits 8
	var leased []redisq.LeasedJob
	first, err := q.Admit(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Jobs) != 8 || first.WakeMs != 0 {
		t.Fatalf("first call: %d jobs, wake %d: want 8 and 0", len(first.Jobs), first.WakeMs)
	}
	leased = append(leased, first.Jobs...)
	for len(leased) < len(jobs) {
		r, err := q.Admit(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Jobs) == 0 {
			t.Fatalf("admitted %d of %d, then none (wake %d)", len(leased), len(jobs), r.WakeMs)
		}
		leased = append(leased, r.Jobs...)
	}
	if r, err := q.Admit(ctx, 100); err != nil || len(r.Jobs) != 0 || r.WakeMs != -1 {
		t.Fatalf("after the last job: %+v %v", r, err)
	}
	if err := q.Confirm(ctx, leased...); err != nil {
		t.Fatal(err)
	}
	ds := make([]redisq.Delivery, len(leased))
	for i, j := range leased {
		ds[i] = redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: j.Attempt}
	}
	claimed, err := q.ClaimBatch(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range claimed {
		if c.Outcome != redisq.ClaimRun {
			t.Fatalf("claim %d (%s): %v", i, ds[i].Group, c.Outcome)
		}
	}
	started, err := q.StartBatch(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range started {
		if o != redisq.ClaimRun {
			t.Fatalf("start %d: %v", i, o)
		}
	}
	if n, err := q.RenewClaims(ctx, ds); err != nil || n != len(ds) {
		t.Fatalf("renewed %d of %d: %v", n, len(ds), err)
	}
	results := make([]contracts.JobResult, len(leased))
	for i, j := range leased {
		results[i] = contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultSuccess}
	}
	recorded, err := q.RecordBatch(ctx, results)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recorded {
		if r.Outcome != redisq.Recorded {
			t.Fatalf("result %d (%s): %v", i, leased[i].Group, r.Outcome)
		}
	}
	for _, tn := range tenants {
		g := contracts.GroupRef{Tenant: tn, ID: "g"}
		if _, err := q.Seal(ctx, g, 5); err != nil {
			t.Fatal(err)
		}
		info, ok, err := q.Group(ctx, g)
		if err != nil || !ok || info.State != contracts.StateCompleted || info.Done != 5 {
			t.Fatalf("%s: %+v %v %v", g, info, ok, err)
		}
	}
	levels, err := q.GroupsPerLevel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range levels {
		if n != 0 {
			t.Fatalf("level %s: %d groups waiting after all ran", p, n)
		}
	}
}

// Admission of several shards shares one READY room per type: the shards
// after the first take only what it left.
func TestShardedAdmissionSharesTheTypeRooms(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{Shards: 4, GlobalLimit: 100000}, false)
	var jobs []redisq.Job
	for _, tn := range tenantsOnShards(4) {
		for i := 0; i < 4; i++ {
			jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: tn, ID: "g"}, ID: fmt.Sprintf("j%d", i), Type: "a", Payload: []byte(`{}`)})
		}
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	r, err := q.Admit(ctx, 100, redisq.WithTypeRooms(map[string]int{"a": 6}, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 6 {
		t.Fatalf("admitted %d jobs of type a with room for 6", len(r.Jobs))
	}
}

// Each shard keeps its own position: one that came back older (its
// primary failed over) makes the position not current, and a reset from
// the positions read puts every shard back.
func TestShardedPositionsArePerShard(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 3}, false)
	p, err := q.Position(ctx, "SUBMIT")
	if err != nil {
		t.Fatal(err)
	}
	if p.Current || len(p.Shards) != 3 {
		t.Fatalf("a new position: %+v", p)
	}
	if p, err = q.ResetPosition(ctx, "SUBMIT", p, 8); err != nil {
		t.Fatal(err)
	}
	if p, err = q.AdvancePosition(ctx, "SUBMIT", 10); err != nil {
		t.Fatal(err)
	}
	if !p.Current || p.Seq != 10 || len(p.Shards) != 3 {
		t.Fatalf("after advance: %+v", p)
	}
	// shard 1's position is lost, as after a failover that dropped it
	if err := b.rdb.Del(ctx, q.Shard(1).Keys().Positions()).Err(); err != nil {
		t.Fatal(err)
	}
	p, err = q.Position(ctx, "SUBMIT")
	if err != nil {
		t.Fatal(err)
	}
	if p.Current || p.Seq != 0 || !p.Shards[0].Current || p.Shards[1].Current {
		t.Fatalf("after shard 1 lost its position: %+v", p)
	}
	// an enqueue guarded by the position applies nothing to shard 1
	tenants := tenantsOnShards(3)
	_, err = q.EnqueueJobsIfCurrent(ctx, "SUBMIT", []redisq.Job{{Group: contracts.GroupRef{Tenant: tenants[1], ID: "g"}, ID: "j", Type: "t"}})
	if !errors.Is(err, redisq.ErrNotCurrent) {
		t.Fatalf("guarded enqueue on a shard not current: %v", err)
	}
	if ok, err := q.GroupExists(ctx, contracts.GroupRef{Tenant: tenants[1], ID: "g"}); err != nil || ok {
		t.Fatalf("group on shard 1 exists %v (%v)", ok, err)
	}
	p, err = q.ResetPosition(ctx, "SUBMIT", p, 12)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Current || p.Seq != 12 {
		t.Fatalf("after reset: %+v", p)
	}
}

// The number of shards is fixed for an installation's life.
func TestShardCountIsFixed(t *testing.T) {
	ctx := context.Background()
	env := testenv.Redis(t)
	if _, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Shards: 4}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 8} {
		_, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Shards: n})
		if !errors.Is(err, redisq.ErrShardCount) {
			t.Fatalf("%d shards after 4: %v", n, err)
		}
	}
	if _, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: "{x}:", Shards: 4}); err == nil {
		t.Fatal("a prefix with a hash tag and 4 shards was accepted")
	}
}

// A tenant's shard is the crc32 of its name modulo the number of shards,
// and its keys carry that shard's hash tag.
func ExampleShardOf() {
	const shards = 16
	s := redisq.ShardOf("acme", shards)
	fmt.Println(s, redisq.ShardPrefix("bulk-action:", s))
	// Output: 14 bulk-action:{s14}:
}

// A sharded admission with a shard's lease epoch admits while the epoch is
// the shard's fence, and nothing once another holder has taken the shard
// over: the shard is reported stale and its jobs stay queued.
func TestShardTurnsAreFencedByTheLeaseEpoch(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{Shards: 2, GlobalLimit: 100000}, false)
	leases, err := q.NewShardLeases(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := leases.Hold(ctx, "a")
	if err != nil || len(a) != 2 {
		t.Fatalf("holder a: %v %v", a, err)
	}
	tn := tenantsOnShards(2)[1]
	var jobs []redisq.Job
	for i := 0; i < 4; i++ {
		jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: tn, ID: "g"}, ID: fmt.Sprintf("j%d", i), Type: "t", Payload: []byte(`{}`)})
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	turn := redisq.ShardTurn{Shard: 1, Epoch: a[1], Max: 1}
	r, err := q.Admit(ctx, 10, redisq.WithShardTurns(turn))
	if err != nil || len(r.Jobs) != 1 || len(r.Stale) != 0 {
		t.Fatalf("holder a's turn with Max 1: %+v %v", r, err)
	}
	// a gives shard 1 back; b takes it at a higher epoch
	if err := leases.Release(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	b, err := leases.Hold(ctx, "b")
	if err != nil || b[1] <= a[1] {
		t.Fatalf("holder b: %v %v (a had %d)", b, err, a[1])
	}
	r, err = q.Admit(ctx, 10, redisq.WithShardTurns(turn))
	if err != nil || len(r.Jobs) != 0 || len(r.Stale) != 1 || r.Stale[0] != 1 {
		t.Fatalf("holder a's turn after b took the shard: %+v %v", r, err)
	}
	r, err = q.Admit(ctx, 10, redisq.WithShardTurns(redisq.ShardTurn{Shard: 1, Epoch: b[1]}))
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("holder b's turn: %+v %v", r, err)
	}
}

// A shard turn admits nothing once its grant's period has ended in Redis
// time, however late the call arrives.
func TestShardTurnEndsWithItsGrantPeriod(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 2, GlobalLimit: 100000}, true)
	tn := tenantsOnShards(2)[0]
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{{Group: contracts.GroupRef{Tenant: tn, ID: "g"}, ID: "j", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	now := b.clock.now().UnixMilli()
	r, err := q.Admit(ctx, 10, redisq.WithShardTurns(redisq.ShardTurn{Shard: 0, UntilMs: now}))
	if err != nil || len(r.Jobs) != 0 || r.WakeMs != 0 {
		t.Fatalf("a turn whose period ended: %+v %v", r, err)
	}
	r, err = q.Admit(ctx, 10, redisq.WithShardTurns(redisq.ShardTurn{Shard: 0, UntilMs: now + 1}))
	if err != nil || len(r.Jobs) != 1 {
		t.Fatalf("a turn within its period: %+v %v", r, err)
	}
}

// A shard turn at a grant is paced by the grant, and its shard's count of
// the window is held to the global limit alone: a grant that falls below
// what the shard admitted earlier in the window (grants change every
// period) still admits.
func TestShardTurnAtASmallerGrantStillAdmits(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 2, GlobalLimit: 1000, Mode: "paced"}, true)
	// start at the beginning of an aligned window, so both calls fall in it
	b.clock.t = b.clock.t.Truncate(time.Second)
	enqueueOnShard0(t, q, 30, "t")
	r, err := q.Admit(ctx, 100, redisq.WithShardTurns(redisq.ShardTurn{Shard: 0, Limit: 1000, Max: 20}))
	if err != nil || len(r.Jobs) != 20 {
		t.Fatalf("a turn at a grant of 100 jobs a period: %d jobs, %v", len(r.Jobs), err)
	}
	b.clock.advance(200 * time.Millisecond)
	// a grant of 1.5 jobs a period (15 a window), below the 20 admitted
	r, err = q.Admit(ctx, 100, redisq.WithShardTurns(redisq.ShardTurn{Shard: 0, Limit: 15, Max: 2}))
	if err != nil || len(r.Jobs) != 1 {
		t.Fatalf("a turn at a grant below the window's count so far: %d jobs, %v (want 1: one interval of 66 ms fits the burst)", len(r.Jobs), err)
	}
}

// admitCounter is an Observer that counts the admissions it is told of.
type admitCounter struct {
	mu    sync.Mutex
	calls int
	jobs  int
	nowMs []int64
}

func (*admitCounter) ObserveLua(string, time.Duration) {}

func (a *admitCounter) ObserveAdmit(nowMs int64, jobs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.jobs += jobs
	a.nowMs = append(a.nowMs, nowMs)
}

// Shard turns that each have a Max and fit together within the call's n
// and every type's READY room admit from their shards at once, each up to
// its Max; turns that do not fit admit one shard after the other within
// the room. An AdmitObserver is told of every call that leased jobs, at
// the script's Redis time.
func TestShardTurnsAdmitAtOnceWithinTheirMaxAndTheRooms(t *testing.T) {
	ctx := context.Background()
	obs := &admitCounter{}
	q, b := setup(t, redisq.Config{Shards: 2, GlobalLimit: 100000, Observer: obs}, true)
	on := tenantsOnShards(2)
	var jobs []redisq.Job
	for s := 0; s < 2; s++ {
		for i := 0; i < 10; i++ {
			jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: on[s], ID: "g"}, ID: fmt.Sprintf("j%02d", i), Type: "t"})
		}
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	perShard := func(r *redisq.AdmitResult) [2]int {
		var n [2]int
		for _, j := range r.Jobs {
			n[redisq.ShardOf(j.Group.Tenant, 2)]++
		}
		return n
	}
	turns := []redisq.ShardTurn{{Shard: 0, Max: 3}, {Shard: 1, Max: 2}}
	r, err := q.Admit(ctx, 10, redisq.WithShardTurns(turns...), redisq.WithTypeRooms(map[string]int{"t": 5}, 0))
	if err != nil || perShard(r) != [2]int{3, 2} {
		t.Fatalf("turns that fit: %v jobs per shard, %v; want 3 and 2", perShard(r), err)
	}
	if obs.calls != 2 || obs.jobs != 5 || obs.nowMs[0] != b.clock.now().UnixMilli() {
		t.Fatalf("observer: %d calls, %d jobs, at %v; want 2 calls, 5 jobs, at %d", obs.calls, obs.jobs, obs.nowMs, b.clock.now().UnixMilli())
	}
	// 3 + 2 do not fit a room of 4: the shards in turn, within it
	r, err = q.Admit(ctx, 10, redisq.WithShardTurns(turns...), redisq.WithTypeRooms(map[string]int{"t": 4}, 0))
	if n := perShard(r); err != nil || n[0]+n[1] != 4 || n[0] > 3 || n[1] > 2 {
		t.Fatalf("turns beyond the room: %v jobs per shard, %v; want 4 in all, at most 3 and 2", n, err)
	}
	// nor a call's n of 4
	r, err = q.Admit(ctx, 4, redisq.WithShardTurns(turns...))
	if n := perShard(r); err != nil || n[0]+n[1] != 4 {
		t.Fatalf("turns beyond n: %v jobs per shard, %v; want 4 in all", n, err)
	}
}

// With shards, a due job is not leased by Release: it goes back to the
// front of its group's queue, so that its shard's owner admits it in fair
// order within the grants of the global limit (a retry counts toward the
// limit as any admission), with its next attempt.
func TestShardedReleaseHandsDueJobsToTheGrants(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 2, GlobalLimit: 1000, Mode: redisq.ModePaced}, true)
	b.clock.t = b.clock.t.Truncate(time.Second)
	tn := tenantsOnShards(2)[1]
	g := contracts.GroupRef{Tenant: tn, ID: "g"}
	var jobs []redisq.Job
	for i := 0; i < 3; i++ {
		jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "t"})
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	turn := redisq.ShardTurn{Shard: 1, Limit: 1000, Max: 10}
	r, err := q.Admit(ctx, 10, redisq.WithShardTurns(turn))
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("admitted %d, %v; want 3", len(r.Jobs), err)
	}
	for _, j := range r.Jobs {
		if _, err := q.Retry(ctx, g, j.ID, j.Attempt, time.Second, "busy"); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.advance(1500 * time.Millisecond)
	rel, err := q.Release(ctx, 10)
	if err != nil || len(rel.Jobs) != 0 || rel.ToGrants != 3 || rel.Handled() != 3 || rel.NextDueMs != -1 {
		t.Fatalf("release: %d leased, %d to the grants, %d handled, next %d, %v; want 0, 3, 3, -1",
			len(rel.Jobs), rel.ToGrants, rel.Handled(), rel.NextDueMs, err)
	}
	r, err = q.Admit(ctx, 10, redisq.WithShardTurns(turn))
	if err != nil || len(r.Jobs) != 3 {
		t.Fatalf("admitted %d after the release, %v; want 3", len(r.Jobs), err)
	}
	for _, j := range r.Jobs {
		if j.Attempt != 2 {
			t.Fatalf("job %s admitted at attempt %d, want 2", j.ID, j.Attempt)
		}
	}
	// the window counts the retries once each, by admission
	w := b.clock.now().UnixMilli() / 1000
	if n, err := q.GlobalAdmitted(ctx, w); err != nil || n != 3 {
		t.Fatalf("admitted in the window: %d, %v; want 3", n, err)
	}
}

// A shard turn's TypeMax bounds the jobs of a limited type in the call,
// and the type's pacer and the shard's count of its window run at the
// type's whole limit: a shard admits past its even part of the type's
// limit (50 of 100) when the grants give it more.
func TestShardTurnTypeMaxBoundsTheCallAtTheWholeTypeLimit(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Shards: 2, GlobalLimit: 1000, Mode: "paced", TypeLimits: map[string]int{"sms": 100}}, true)
	b.clock.t = b.clock.t.Truncate(time.Second)
	enqueueOnShard0(t, q, 70, "sms")
	turn := func(typeMax int) *redisq.AdmitResult {
		t.Helper()
		r, err := q.Admit(ctx, 100, redisq.WithShardTurns(redisq.ShardTurn{Shard: 0, Limit: 1000, Max: 50,
			TypeMax: map[string]int{"sms": typeMax}}))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := turn(3); len(r.Jobs) != 3 {
		t.Fatalf("a turn with 3 sms due: %d jobs", len(r.Jobs))
	}
	if r := turn(0); len(r.Jobs) != 0 || r.RateHeld["sms"] == 0 || r.WakeMs <= 0 {
		t.Fatalf("a turn with no sms due: %d jobs, held %v, wake %d", len(r.Jobs), r.RateHeld, r.WakeMs)
	}
	total := 3
	for range 15 {
		b.clock.advance(50 * time.Millisecond)
		r := turn(4)
		if len(r.Jobs) != 4 {
			t.Fatalf("after %d sms in the window, a turn with 4 due: %d jobs (held %v)", total, len(r.Jobs), r.RateHeld)
		}
		total += len(r.Jobs)
	}
	// 63 in the window: past the shard's even part, within the whole limit
	if total != 63 {
		t.Fatalf("%d sms admitted", total)
	}
}

// enqueueOnShard0 enqueues n jobs of type ty in one group of a tenant of
// shard 0 (of 2).
func enqueueOnShard0(t *testing.T, q *redisq.Queue, n int, ty string) {
	t.Helper()
	g := contracts.GroupRef{Tenant: tenantsOnShards(2)[0], ID: "g"}
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%02d", i), Type: ty}
	}
	if _, err := q.EnqueueJobs(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}
