package redisq_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The reads, sweeps and checks that span tenants, through the Queue of an
// installation of 4 shards: each goes through every shard and merges, and
// those about one tenant or group go to its shard.

const testShards = 4

// shardTenants returns perShard tenants of every one of testShards shards:
// out[i] are shard i's.
func tenantsPerShard(perShard int) [][]string {
	out := make([][]string, testShards)
	for i := 0; ; i++ {
		t := fmt.Sprintf("ten%d", i)
		s := redisq.ShardOf(t, testShards)
		if len(out[s]) < perShard {
			out[s] = append(out[s], t)
		}
		full := true
		for _, ts := range out {
			full = full && len(ts) == perShard
		}
		if full {
			return out
		}
	}
}

// enqueueTo enqueues n jobs into group g through its tenant's shard.
func enqueueTo(t *testing.T, q *redisq.Queue, g contracts.GroupRef, n int) {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%03d", i), Type: "t", Payload: []byte(`{}`)}
	}
	out, err := q.For(g.Tenant).EnqueueBatch(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o != redisq.Added {
			t.Fatalf("%s job %d: %v", g, i, o)
		}
	}
}

func setupSharded(t *testing.T, cfg redisq.Config) (*redisq.Queue, *testBundle) {
	t.Helper()
	cfg.Shards = testShards
	q, b := setup(t, cfg, true)
	if q.ShardCount() != testShards {
		t.Fatalf("shard count %d", q.ShardCount())
	}
	return q, b
}

// listAll pages through ListGroups and returns the groups in the order
// listed.
func listAll(t *testing.T, q *redisq.Queue, o redisq.ListOptions) []*redisq.GroupInfo {
	t.Helper()
	var out []*redisq.GroupInfo
	for calls := 0; ; calls++ {
		if calls > 1000 {
			t.Fatal("the list does not end")
		}
		page, next, err := q.ListGroups(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > o.Limit {
			t.Fatalf("a page of %d groups, limit %d", len(page), o.Limit)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		o.Cursor = next
	}
}

// listOrder orders groups as the lists do: newest first, then by
// "<tenant>:<groupId>" descending.
func listOrder(a, b *redisq.GroupInfo) int {
	return cmp.Or(cmp.Compare(b.CreatedAtMs, a.CreatedAtMs),
		cmp.Compare(b.Group.Tenant+":"+b.Group.ID, a.Group.Tenant+":"+a.Group.ID))
}

func refsOf(gs []*redisq.GroupInfo) []contracts.GroupRef {
	out := make([]contracts.GroupRef, len(gs))
	for i, g := range gs {
		out[i] = g.Group
	}
	return out
}

// TestShardedListGroups: the list of every tenant pages over every shard
// in the order of one index, each group once, with and without a state
// filter; a tenant's list is its shard's.
func TestShardedListGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setupSharded(t, redisq.Config{GlobalLimit: redisq.UngatedLimit})
	tenants := tenantsPerShard(2)
	var all []contracts.GroupRef
	// Groups created over several milliseconds, several in the same one
	// on different shards (ordered by member then), unevenly per shard.
	for round := 0; round < 4; round++ {
		for s, ts := range tenants {
			for k, tn := range ts {
				if (s+k+round)%3 == 0 {
					continue
				}
				g := contracts.GroupRef{Tenant: tn, ID: fmt.Sprintf("g%d", round)}
				enqueueTo(t, q, g, 1)
				all = append(all, g)
			}
			if round%2 == 0 {
				b.clock.advance(time.Millisecond)
			}
		}
		b.clock.advance(time.Millisecond)
	}
	got := listAll(t, q, redisq.ListOptions{Limit: 3})
	if len(got) != len(all) {
		t.Fatalf("listed %d groups, want %d", len(got), len(all))
	}
	if !slices.IsSortedFunc(got, listOrder) {
		t.Errorf("not in list order: %v", refsOf(got))
	}
	seen := map[contracts.GroupRef]bool{}
	shardsSeen := map[int]bool{}
	for _, g := range got {
		if seen[g.Group] {
			t.Errorf("%s listed twice", g.Group)
		}
		seen[g.Group] = true
		shardsSeen[redisq.ShardOf(g.Group.Tenant, testShards)] = true
	}
	for _, g := range all {
		if !seen[g] {
			t.Errorf("%s not listed", g)
		}
	}
	if len(shardsSeen) != testShards {
		t.Errorf("groups of %d shards listed", len(shardsSeen))
	}
	// One page of everything is the same list.
	if one, _, err := q.ListGroups(ctx, redisq.ListOptions{Limit: 1000}); err != nil || !slices.Equal(refsOf(one), refsOf(got)) {
		t.Errorf("one page: %v %v", refsOf(one), err)
	}

	// Start the groups of round 1 and 3 on every shard: a filter on
	// RUNNING finds them, across pages that come back short.
	var running []*redisq.GroupInfo
	for _, s := range q.Shards() {
		if _, err := s.DequeueBatch(ctx, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range got {
		if g.Group.ID == "g0" || g.Group.ID == "g2" {
			continue
		}
		running = append(running, g)
	}
	// Groups of rounds 0 and 2 become CANCELLED.
	for _, g := range all {
		if g.ID == "g0" || g.ID == "g2" {
			if _, err := q.For(g.Tenant).Cancel(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
	}
	gotRunning := listAll(t, q, redisq.ListOptions{Limit: 1, States: []contracts.GroupState{contracts.StateRunning}})
	if !slices.Equal(refsOf(gotRunning), refsOf(running)) {
		t.Errorf("running groups listed %v, want %v", refsOf(gotRunning), refsOf(running))
	}

	// A tenant's list: its own groups, in order, paged.
	tn := tenants[2][0]
	mine := listAll(t, q, redisq.ListOptions{Tenant: tn, Limit: 1})
	var want []contracts.GroupRef
	for _, g := range got {
		if g.Group.Tenant == tn {
			want = append(want, g.Group)
		}
	}
	if len(want) == 0 || !slices.Equal(refsOf(mine), want) {
		t.Errorf("tenant %s listed %v, want %v", tn, refsOf(mine), want)
	}
	if _, _, err := q.ListGroups(ctx, redisq.ListOptions{Cursor: "%%"}); !errors.Is(err, redisq.ErrBadCursor) {
		t.Errorf("a bad cursor: %v", err)
	}
}

// TestShardedCountsAndLimiter: the window's admissions, the queues' sizes
// and the limiter's figures sum every shard's; a tenant's come from its
// shard. A retry and a group's congestion go to the group's shard.
func TestShardedCountsAndLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setupSharded(t, redisq.Config{GlobalLimit: 1000})
	tenants := tenantsPerShard(2)
	admitted := map[string]int64{}
	var total int64
	var jobs []redisq.LeasedJob
	for s, ts := range tenants[:3] { // shards 0..2 busy, shard 3 idle
		for k, tn := range ts {
			n := 1 + s + k
			enqueueTo(t, q, contracts.GroupRef{Tenant: tn, ID: "g"}, n)
		}
		r, err := q.Shard(s).Admit(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range r.Jobs {
			admitted[j.Group.Tenant]++
			total++
		}
		jobs = append(jobs, r.Jobs...)
	}
	if total != 1+2+2+3+3+4 {
		t.Fatalf("admitted %d", total)
	}
	if err := q.For(tenants[1][1]).SetTenantWeight(ctx, tenants[1][1], 3); err != nil {
		t.Fatal(err)
	}
	now, err := q.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := now.UnixMilli() / q.Config().Window.Milliseconds()
	c, err := q.WindowCounts(ctx, w)
	if err != nil || c.Global != total || c.Active != 6 || c.BackingOff != 0 || len(c.Tenants) != 6 {
		t.Fatalf("window counts: %+v %v", c, err)
	}
	for tn, n := range admitted {
		if c.Tenants[tn] != n {
			t.Errorf("window counts of %s: %d, want %d", tn, c.Tenants[tn], n)
		}
	}
	if n, err := q.GlobalAdmitted(ctx, w); err != nil || n != total {
		t.Errorf("admitted in the window: %d %v, want %d", n, err, total)
	}
	if act, err := q.ActiveTenants(ctx); err != nil || len(act) != 6 {
		t.Errorf("active tenants: %v %v", act, err)
	}
	tn := tenants[1][1]
	st, err := q.LimiterStatus(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	// Its shard's part of the limit (1000/4) over the shard's 2 active
	// tenants, times its weight.
	want := redisq.LimiterStatus{Window: w, GlobalCount: total, GlobalLimit: 1000, TenantCount: admitted[tn],
		TenantLimit: 125 * 3, Weight: 3, Active: 6}
	if *st != want {
		t.Errorf("limiter status of %s: %+v, want %+v", tn, *st, want)
	}
	st, err = q.LimiterStatus(ctx, "")
	want = redisq.LimiterStatus{Window: w, GlobalCount: total, GlobalLimit: 1000, TenantLimit: 1000 / 6, Weight: 1, Active: 6}
	if err != nil || *st != want {
		t.Errorf("limiter status: %+v %v, want %+v", st, err, want)
	}

	// Retry a job of each busy shard through the Queue.
	retried := map[int]bool{}
	for _, j := range jobs {
		s := redisq.ShardOf(j.Group.Tenant, testShards)
		if retried[s] {
			continue
		}
		retried[s] = true
		if res, err := q.Retry(ctx, j.Group, j.ID, j.Attempt, -1, "busy"); err != nil || res.Outcome != "parked" || res.NonReadyCount != 1 {
			t.Fatalf("retry %s/%s: %+v %v", j.Group, j.ID, res, err)
		}
		if cs, err := q.Congestion(ctx, j.Group); err != nil || cs.NonReadyCount != 1 {
			t.Fatalf("congestion of %s: %+v %v", j.Group, cs, err)
		}
	}
	sz, err := q.Sizes(ctx)
	if err != nil || sz.BackingOff != 3 || sz.Inflight != total || sz.At.IsZero() {
		t.Errorf("sizes: %+v %v", sz, err)
	}
	if c, err := q.WindowCounts(ctx, w); err != nil || c.BackingOff != 3 {
		t.Errorf("window counts after retries: %+v %v", c, err)
	}
}

// TestShardedStuckAndCongestion: candidates and stuck groups are found on
// every shard, watched groups land in their own shard, and the congestion
// summary and its history count the whole installation.
func TestShardedStuckAndCongestion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setupSharded(t, redisq.Config{GlobalLimit: redisq.UngatedLimit})
	tenants := tenantsPerShard(1)
	var started, queued []contracts.GroupRef
	for s, ts := range tenants {
		g := contracts.GroupRef{Tenant: ts[0], ID: "run"}
		enqueueTo(t, q, g, 2)
		if s < 3 {
			if js, err := q.Shard(s).DequeueBatch(ctx, 1); err != nil || len(js) != 1 {
				t.Fatalf("dequeue on shard %d: %v %v", s, js, err)
			}
			started = append(started, g)
		} else {
			queued = append(queued, g)
		}
	}
	// Watch groups of two shards through the Queue.
	watched := []contracts.GroupRef{{Tenant: tenants[1][0], ID: "w"}, {Tenant: tenants[3][0], ID: "w"}}
	if err := q.WatchGroups(ctx, watched...); err != nil {
		t.Fatal(err)
	}
	for s, sq := range q.Shards() {
		n, err := b.rdb.ZScore(ctx, sq.Keys().StuckWatch(), tenants[s][0]+":w").Result()
		if on := err == nil; on != (s == 1 || s == 3) {
			t.Errorf("shard %d: watched w %v (%v %v)", s, on, n, err)
		}
	}
	cands, err := q.CandidateGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(started, queued, watched)
	slices.SortFunc(want, func(a, b contracts.GroupRef) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
	})
	if !slices.Equal(cands, want) {
		t.Errorf("candidates %v, want %v", cands, want)
	}
	b.clock.advance(time.Minute)
	stuck, err := q.StuckGroups(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []contracts.GroupRef
	for _, g := range stuck {
		got = append(got, g.Group)
	}
	wantStuck := slices.Clone(started)
	slices.SortFunc(wantStuck, func(a, b contracts.GroupRef) int { return cmp.Compare(a.Tenant, b.Tenant) })
	if !slices.Equal(got, wantStuck) {
		t.Errorf("stuck %v, want %v", got, wantStuck)
	}
	// The watched groups without meta were taken off their shard's list.
	for _, g := range watched {
		if _, err := b.rdb.ZScore(ctx, q.For(g.Tenant).Keys().StuckWatch(), g.Tenant+":w").Result(); err == nil {
			t.Errorf("%s still watched", g)
		}
	}

	sum, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ActiveGroups != 4 || len(sum.Groups) != 4 || sum.GroupsPerLevel[redisq.CongestionNone] != 4 ||
		!slices.IsSortedFunc(sum.Groups, func(a, b *redisq.CongestionState) int { return cmp.Compare(a.Tenant, b.Tenant) }) {
		t.Errorf("congestion summary: %+v", sum)
	}
	if sum.ActiveTenants != 3 { // the tenants that asked for capacity
		t.Errorf("active tenants in the summary: %d", sum.ActiveTenants)
	}
	hist, err := q.History(ctx, 10)
	if err != nil || len(hist) != 1 || hist[0].ActiveGroups != 4 || hist[0].AtMs != sum.AtMs {
		t.Errorf("history: %+v %v", hist, err)
	}
}

// TestShardedSweeps: cancels cut short on several shards are all finished
// by one FinishCancels, and CorrectCounters fixes drifted counters on
// every shard.
func TestShardedSweeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stop := &stopAfter{script: "cancel"}
	q, b := setupSharded(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, Observer: stop})
	tenants := tenantsPerShard(1)
	var cut []contracts.GroupRef
	for s, ts := range tenants {
		if s == 2 {
			continue
		}
		g := contracts.GroupRef{Tenant: ts[0], ID: "big"}
		enqueueTo(t, q, g, 20)
		cctx, cancel := context.WithCancel(ctx)
		stop.cancel = cancel
		if _, err := q.For(g.Tenant).Cancel(cctx, g, redisq.SweepChunk(5)); !errors.Is(err, context.Canceled) {
			t.Fatalf("cut-short cancel of %s: %v", g, err)
		}
		cancel()
		cut = append(cut, g)
	}
	stop.cancel = nil
	done, err := q.FinishCancels(ctx, 0, redisq.SweepChunk(5))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(cut, func(a, b contracts.GroupRef) int { return cmp.Compare(a.Tenant, b.Tenant) })
	if len(done) != len(cut) {
		t.Fatalf("finished %+v, want %v", done, cut)
	}
	for i, d := range done {
		if d.Group != cut[i] || d.Dropped != 15 || d.Counts.Cancelled != 20 || d.Counts.State != contracts.StateCancelled {
			t.Errorf("finished %d: %+v, want %s with 15 dropped", i, d, cut[i])
		}
	}
	if again, err := q.FinishCancels(ctx, 0); err != nil || len(again) != 0 {
		t.Errorf("second sweep: %+v %v", again, err)
	}

	// A drifted counter of a watched group on every shard.
	for _, ts := range tenants {
		g := contracts.GroupRef{Tenant: ts[0], ID: "z"}
		if err := q.WatchGroups(ctx, g); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.Set(ctx, q.For(g.Tenant).Keys().CongestionCount(g), 3, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fixed, err := q.CorrectCounters(ctx)
	if err != nil || fixed != testShards {
		t.Fatalf("fixed %d, %v; want %d", fixed, err, testShards)
	}
	for _, ts := range tenants {
		g := contracts.GroupRef{Tenant: ts[0], ID: "z"}
		if cs, err := q.Congestion(ctx, g); err != nil || cs.NonReadyCount != 0 {
			t.Errorf("counter of %s: %+v %v", g, cs, err)
		}
	}
	if fixed, err := q.CorrectCounters(ctx); err != nil || fixed != 0 {
		t.Errorf("second correction fixed %d, %v", fixed, err)
	}
}

// TestShardedDashboard: one read holds the tenants of every shard with
// their counts, the weights of all, the backoff queue's total and the
// worker types announced once for the installation.
func TestShardedDashboard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setupSharded(t, redisq.Config{GlobalLimit: redisq.UngatedLimit})
	tenants := tenantsPerShard(1)
	for s, ts := range tenants {
		g := contracts.GroupRef{Tenant: ts[0], ID: "g"}
		enqueueTo(t, q, g, 2+s)
		js, err := q.Shard(s).DequeueBatch(ctx, 1+s)
		if err != nil || len(js) != 1+s {
			t.Fatalf("dequeue on shard %d: %v %v", s, js, err)
		}
		if s%2 == 1 {
			if res, err := q.Retry(ctx, js[0].Group, js[0].ID, js[0].Attempt, -1, "busy"); err != nil || res.Outcome != "parked" {
				t.Fatalf("retry: %+v %v", res, err)
			}
		}
		if err := q.For(ts[0]).SetTenantWeight(ctx, ts[0], 2+s); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.AnnounceTypes(ctx, []string{"t"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	d, err := q.ReadDashboard(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.NonReady != 2 || len(d.Active) != testShards || len(d.Weights) != testShards || len(d.Tenants) != testShards {
		t.Errorf("dashboard: nonReady %d, active %v, weights %v, %d tenants", d.NonReady, d.Active, d.Weights, len(d.Tenants))
	}
	if len(d.WorkerTypes) != 1 || d.WorkerTypes[0].Type != "t" {
		t.Errorf("worker types: %+v", d.WorkerTypes)
	}
	for s, ts := range tenants {
		f := d.Tenant(ts[0])
		backoff := int64(s % 2)
		if f.ActiveGroups != 1 || f.QueuedJobs != int64(2+s) || f.InFlightJobs != int64(1+s)-backoff ||
			f.BackingOffJobs != backoff || !slices.Equal(f.Types, []string{"t"}) {
			t.Errorf("tenant %s (shard %d): %+v", ts[0], s, f)
		}
		if d.Weights[ts[0]] != fmt.Sprint(2+s) {
			t.Errorf("weight of %s: %q", ts[0], d.Weights[ts[0]])
		}
	}
	// Groups of two shards expire: the index sweep of every shard finds
	// them.
	for _, s := range []int{0, 3} {
		g := contracts.GroupRef{Tenant: tenants[s][0], ID: "g"}
		if err := q.For(g.Tenant).Client().Del(ctx, q.For(g.Tenant).Keys().GroupMeta(g)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := q.PruneGroupIndexes(ctx, 0); err != nil || n != 2 {
		t.Errorf("pruned %d, %v; want 2", n, err)
	}
}

// TestShardedLinks: the retry links of a group are kept in its shard and
// read back through the Queue.
func TestShardedLinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setupSharded(t, redisq.Config{})
	tn := tenantsPerShard(1)[3][0]
	from, retry := contracts.GroupRef{Tenant: tn, ID: "a"}, contracts.GroupRef{Tenant: tn, ID: "a-retry"}
	if err := q.LinkRetry(ctx, from, retry, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, err := b.rdb.Exists(ctx, q.Shard(3).Keys().GroupRetries(from), q.Shard(3).Keys().GroupRetryOf(retry)).Result(); err != nil || n != 2 {
		t.Errorf("links in the tenant's shard: %d %v", n, err)
	}
	if of, rs, err := q.Links(ctx, from); err != nil || of != "" || !slices.Equal(rs, []string{"a-retry"}) {
		t.Errorf("links of a: %q %v %v", of, rs, err)
	}
	if of, rs, err := q.Links(ctx, retry); err != nil || of != "a" || len(rs) != 0 {
		t.Errorf("links of a-retry: %q %v %v", of, rs, err)
	}
	if ok, err := q.GroupExists(ctx, from); err != nil || ok {
		t.Errorf("exists: %v %v", ok, err)
	}
}

// TestShardedListGroupsFrontier: a shard that stops before its end with
// nothing found holds back the other shards' older groups, so a filtered
// list never steps over groups that shard has not read yet.
func TestShardedListGroupsFrontier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setupSharded(t, redisq.Config{GlobalLimit: redisq.UngatedLimit})
	tenants := tenantsPerShard(1)
	old := contracts.GroupRef{Tenant: tenants[0][0], ID: "old"}
	mid := contracts.GroupRef{Tenant: tenants[1][0], ID: "mid"}
	for _, g := range []contracts.GroupRef{old, mid} {
		enqueueTo(t, q, g, 1)
		if js, err := q.For(g.Tenant).DequeueBatch(ctx, 1); err != nil || len(js) != 1 {
			t.Fatalf("dequeue %s: %v %v", g, js, err)
		}
		b.clock.advance(time.Millisecond)
	}
	// Newer groups of mid's tenant that never start: more than one call of
	// a filtered list reads in its shard (10 × Limit entries).
	for i := 0; i < 12; i++ {
		enqueueTo(t, q, contracts.GroupRef{Tenant: mid.Tenant, ID: fmt.Sprintf("c%02d", i)}, 1)
		b.clock.advance(time.Millisecond)
	}
	got := listAll(t, q, redisq.ListOptions{Limit: 1, States: []contracts.GroupState{contracts.StateRunning}})
	if want := []contracts.GroupRef{mid, old}; !slices.Equal(refsOf(got), want) {
		t.Errorf("running groups listed %v, want %v", refsOf(got), want)
	}
}
