package redisq_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

const shardTTL = 3 * time.Second

// newShardLeases returns shard leases over n shards on rdb under prefix,
// with scripts on clock's time.
func newShardLeases(t testing.TB, rdb redis.UniversalClient, prefix string, n int, clock *fakeClock) *redisq.ShardLeases {
	t.Helper()
	l, err := redisq.NewShardLeases(context.Background(), rdb, redisq.ShardLeasesConfig{
		Prefix: prefix, Shards: n, TTL: shardTTL, Clock: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// setupShardLeases is newShardLeases on the shared test Redis under the
// test's own prefix.
func setupShardLeases(t testing.TB, n int) (*redisq.ShardLeases, *fakeClock) {
	t.Helper()
	env := testenv.Redis(t)
	clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
	return newShardLeases(t, env.Client, env.Prefix, n, clock), clock
}

func hold(t testing.TB, l *redisq.ShardLeases, holder string) map[int]uint64 {
	t.Helper()
	m, err := l.Hold(context.Background(), holder)
	if err != nil {
		t.Fatalf("hold %s: %v", holder, err)
	}
	return m
}

func fenceOK(t testing.TB, l *redisq.ShardLeases, shard int, epoch uint64) bool {
	t.Helper()
	ok, err := l.FenceOK(context.Background(), shard, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkHeld fails when two of held hold the same shard, or a holder's
// stored leases differ from what its Hold returned, or a fence is not its
// holder's epoch; it returns each holder's number of shards.
func checkHeld(t testing.TB, l *redisq.ShardLeases, held map[string]map[int]uint64) map[string]int {
	t.Helper()
	owner := map[int]string{}
	counts := map[string]int{}
	for h, m := range held {
		counts[h] = len(m)
		for s, e := range m {
			if o, ok := owner[s]; ok {
				t.Fatalf("shard %d held by %s and %s", s, o, h)
			}
			owner[s] = h
			if !fenceOK(t, l, s, e) || (e > 1 && fenceOK(t, l, s, e-1)) {
				t.Fatalf("shard %d of %s: its fence is not its epoch %d", s, h, e)
			}
		}
	}
	leases, err := l.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, le := range leases {
		if m, ok := held[le.Holder]; ok {
			if e, ok := m[le.Shard]; !ok || e != le.Epoch {
				t.Fatalf("stored lease %+v, %s's Hold returned %v", le, le.Holder, m)
			}
		}
	}
	return counts
}

// spread holds for each holder in order, rounds times, the clock advancing
// a third of the TTL before each round, and returns the last holds.
func spread(t testing.TB, l *redisq.ShardLeases, clock *fakeClock, rounds int, holders ...string) map[string]map[int]uint64 {
	t.Helper()
	held := map[string]map[int]uint64{}
	for range rounds {
		clock.advance(shardTTL / 3)
		for _, h := range holders {
			held[h] = hold(t, l, h)
		}
	}
	return held
}

// TestShardLeasesSpreadEvenly: 16 shards over 3 holders end 6/5/5 (the
// first holder by id gets the extra one), every shard held once and fenced
// with its lease's epoch.
func TestShardLeasesSpreadEvenly(t *testing.T) {
	t.Parallel()
	l, clock := setupShardLeases(t, 16)
	held := spread(t, l, clock, 2, "a", "b", "c")
	counts := checkHeld(t, l, held)
	if counts["a"] != 6 || counts["b"] != 5 || counts["c"] != 5 {
		t.Fatalf("shares %v, want a 6, b 5, c 5", counts)
	}
	// further rounds change nothing: the leases are renewed, epochs kept
	again := spread(t, l, clock, 3, "a", "b", "c")
	for h := range held {
		if fmt.Sprint(again[h]) != fmt.Sprint(held[h]) {
			t.Fatalf("%s held %v, then %v", h, held[h], again[h])
		}
	}
}

// TestShardLeasesJoin: a fourth holder joins; each of the others frees its
// shards beyond the new share at its next call, and the newcomer's next
// call takes its share, with epochs above the shards' earlier ones.
func TestShardLeasesJoin(t *testing.T) {
	t.Parallel()
	l, clock := setupShardLeases(t, 16)
	held := spread(t, l, clock, 2, "a", "b", "c")
	before := map[int]uint64{}
	for _, m := range held {
		for s, e := range m {
			before[s] = e
		}
	}
	clock.advance(shardTTL / 3)
	if d := hold(t, l, "d"); len(d) != 0 {
		t.Fatalf("d took %v while every shard was held", d)
	}
	for _, h := range []string{"a", "b", "c"} {
		held[h] = hold(t, l, h)
	}
	held["d"] = hold(t, l, "d")
	counts := checkHeld(t, l, held)
	for _, n := range counts {
		if n != 4 {
			t.Fatalf("shares %v, want 4 each", counts)
		}
	}
	for s, e := range held["d"] {
		if e <= before[s] {
			t.Fatalf("d took shard %d at epoch %d, it had %d", s, e, before[s])
		}
		if fenceOK(t, l, s, before[s]) {
			t.Fatalf("shard %d: the previous holder's epoch %d still passes the fence", s, before[s])
		}
	}
}

// TestShardLeasesTakeover: a holder that stops calling keeps its shards
// until the TTL has passed since its last call, then the others take them
// with higher epochs, and its epochs are refused by the fences.
func TestShardLeasesTakeover(t *testing.T) {
	t.Parallel()
	l, clock := setupShardLeases(t, 16)
	testShardTakeover(t, l, clock)
}

// testShardTakeover is TestShardLeasesTakeover on l; it returns the holds
// of the last round.
func testShardTakeover(t *testing.T, l *redisq.ShardLeases, clock *fakeClock) map[string]map[int]uint64 {
	ctx := context.Background()
	held := spread(t, l, clock, 2, "a", "b", "c")
	gone := held["c"] // c stops calling now
	delete(held, "c")
	lastCall := clock.t
	for clock.t.Add(shardTTL / 3).Before(lastCall.Add(shardTTL)) {
		clock.advance(shardTTL / 3)
		held["a"], held["b"] = hold(t, l, "a"), hold(t, l, "b")
		if n := len(held["a"]) + len(held["b"]); n != 11 {
			t.Fatalf("a and b hold %d shards %s after c's last call, before its TTL", n, clock.t.Sub(lastCall))
		}
	}
	clock.t = lastCall.Add(shardTTL - time.Millisecond)
	held["a"], held["b"] = hold(t, l, "a"), hold(t, l, "b")
	if n := len(held["a"]) + len(held["b"]); n != 11 {
		t.Fatalf("a and b hold %d shards a millisecond before c's leases run out", n)
	}
	clock.advance(time.Millisecond)
	held["a"], held["b"] = hold(t, l, "a"), hold(t, l, "b")
	counts := checkHeld(t, l, held)
	if counts["a"] != 8 || counts["b"] != 8 {
		t.Fatalf("shares %v after c's leases ran out, want 8 each", counts)
	}
	for s, old := range gone {
		var now uint64
		for _, m := range held {
			if e, ok := m[s]; ok {
				now = e
			}
		}
		if now <= old {
			t.Fatalf("shard %d taken over at epoch %d, c had %d", s, now, old)
		}
		if fenceOK(t, l, s, old) {
			t.Fatalf("shard %d: c's epoch %d passes the fence after the takeover", s, old)
		}
		if err := l.Fence(ctx, s, old); !errors.Is(err, redisq.ErrStaleEpoch) {
			t.Fatalf("shard %d: fence with c's stale epoch: %v", s, err)
		}
		if !fenceOK(t, l, s, now) {
			t.Fatalf("shard %d: the taker's epoch %d is refused", s, now)
		}
	}
	// c comes back: it is a new taker, with new epochs
	clock.advance(shardTTL / 3)
	if c := hold(t, l, "c"); len(c) != 0 {
		t.Fatalf("c came back holding %v", c)
	}
	held = spread(t, l, clock, 2, "a", "b", "c")
	for s, e := range held["c"] {
		if old, ok := gone[s]; ok && e <= old {
			t.Fatalf("c took shard %d back at epoch %d, it had %d", s, e, old)
		}
	}
	if counts := checkHeld(t, l, held); counts["a"] != 6 || counts["b"] != 5 || counts["c"] != 5 {
		t.Fatalf("shares %v after c came back, want 6/5/5", counts)
	}
	return held
}

// TestShardLeasesOnRedisCluster: on three primaries the leases (one slot,
// "{g}") and the shards' fences ("{s<i>}", spread over the primaries) are
// on different nodes; the takeover runs as on one server, and each fence
// is stored on its shard's primary with its holder's epoch.
func TestShardLeasesOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := testenv.NewRedisCluster(t, 3)
	const prefix, shards = "sl:", 16
	clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
	l := newShardLeases(t, cluster.Client(t), prefix, shards, clock)
	held := testShardTakeover(t, l, clock)

	owner := func(key string) int {
		t.Helper()
		slot, err := cluster.KeySlot(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		n, err := cluster.SlotOwner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	leasesOn := owner(redisq.NewKeys(redisq.GlobalPrefix(prefix)).ShardLeases())
	nodes := map[int]bool{}
	elsewhere := 0
	for _, m := range held {
		for s, e := range m {
			key := l.ShardKeys(s).Fence()
			n := owner(key)
			nodes[n] = true
			if n != leasesOn {
				elsewhere++
			}
			node := redis.NewClient(&redis.Options{Addr: cluster.Addrs()[n]})
			v, err := node.Get(ctx, key).Uint64()
			_ = node.Close()
			if err != nil || v != e {
				t.Fatalf("shard %d's fence on node %d: %d %v, want %d", s, n, v, err, e)
			}
		}
	}
	if len(nodes) < 2 || elsewhere == 0 {
		t.Fatalf("fences on nodes %v, leases on node %d: want the fences spread, some away from the leases", nodes, leasesOn)
	}
	t.Logf("leases on node %d; fences on nodes %v, %d of %d away from the leases", leasesOn, nodes, elsewhere, shards)
}

// TestShardLeasesRelease: a holder's Release hands its shards to the
// others at their next call, without waiting for the TTL; a Release by
// another holder leaves a lease alone.
func TestShardLeasesRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, clock := setupShardLeases(t, 16)
	held := spread(t, l, clock, 2, "a", "b", "c")
	var ofA []int
	for s := range held["a"] {
		ofA = append(ofA, s)
	}
	if err := l.Release(ctx, "b", ofA...); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	leases, err := l.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, le := range leases {
		if le.Holder == "c" {
			t.Fatalf("c's lease on shard %d stayed after its release", le.Shard)
		}
	}
	delete(held, "c")
	held["a"], held["b"] = hold(t, l, "a"), hold(t, l, "b") // same millisecond
	if counts := checkHeld(t, l, held); counts["a"] != 8 || counts["b"] != 8 {
		t.Fatalf("shares %v at once after c's release, want 8 each", counts)
	}
	for _, s := range ofA {
		if _, ok := held["a"][s]; !ok {
			t.Fatalf("a lost shard %d to b's release", s)
		}
	}
}

// TestShardFence: a fence only rises; an epoch below it is refused, the
// current one and later ones accepted, epoch 0 (no shard leases) always;
// each shard has its own fence.
func TestShardFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := setupShardLeases(t, 4)
	if !fenceOK(t, l, 3, 1) || !fenceOK(t, l, 3, 0) {
		t.Fatal("an unfenced shard refuses a call")
	}
	if err := l.Fence(ctx, 3, 5); err != nil {
		t.Fatal(err)
	}
	if !fenceOK(t, l, 3, 5) || !fenceOK(t, l, 3, 6) || fenceOK(t, l, 3, 4) || !fenceOK(t, l, 3, 0) {
		t.Fatal("fence 5: want epochs 5, 6 and 0 accepted, 4 refused")
	}
	if err := l.Fence(ctx, 3, 4); !errors.Is(err, redisq.ErrStaleEpoch) {
		t.Fatalf("fence lowered to 4: %v", err)
	}
	if err := l.Fence(ctx, 3, 5); err != nil {
		t.Fatalf("fence raised to its own value: %v", err)
	}
	if err := l.Fence(ctx, 3, 7); err != nil || fenceOK(t, l, 3, 6) || !fenceOK(t, l, 3, 7) {
		t.Fatalf("fence 7: %v", err)
	}
	if !fenceOK(t, l, 2, 1) {
		t.Fatal("shard 3's fence refused a call on shard 2")
	}
	if err := l.Fence(ctx, 0, 0); err == nil {
		t.Fatal("fence at epoch 0 accepted")
	}
	if _, err := l.FenceOK(ctx, 4, 1); err == nil {
		t.Fatal("shard 4 of 4 accepted")
	}
}

// TestShardLeasesShardCount: holders counting different numbers of shards
// are refused; a prefix with a hash tag cannot hold several shards.
func TestShardLeasesShardCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.Redis(t)
	clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
	l16 := newShardLeases(t, env.Client, env.Prefix, 16, clock)
	l8 := newShardLeases(t, env.Client, env.Prefix, 8, clock)
	hold(t, l16, "a")
	if _, err := l8.Hold(ctx, "b"); err == nil {
		t.Fatal("a holder of 8 shards joined leases of 16")
	}
	if _, err := redisq.NewShardLeases(ctx, env.Client, redisq.ShardLeasesConfig{Prefix: "{x}:", Shards: 2}); err == nil {
		t.Fatal("a tagged prefix accepted for 2 shards")
	}
}

var leaseSeed = flag.Uint64("leases.seed", 0, "TestShardLeasesRandomized's seed (0: a new one)")

// TestShardLeasesRandomized: holders join, stop cleanly and die at random
// over many rounds (a new seed each run, logged; -leases.seed repeats
// one). After every call no shard is held by two holders whose leases run
// (as each holder's last Hold said), a shard taken over has a higher epoch
// whose fence refuses the earlier holder's, and once the live holders have
// been the same for two rounds every shard is held, the shares even.
func TestShardLeasesRandomized(t *testing.T) {
	t.Parallel()
	const shards, rounds = 16, 300
	ctx := context.Background()
	l, clock := setupShardLeases(t, shards)
	seed := uint64(time.Now().UnixNano())
	if *leaseSeed != 0 {
		seed = *leaseSeed
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d (run again with -args -leases.seed %d)", seed, seed)

	type state struct {
		alive    bool
		lastCall time.Time
		held     map[int]uint64
	}
	holders := map[string]*state{}
	next := 0
	join := func() {
		holders[fmt.Sprintf("h%03d", next)] = &state{alive: true}
		next++
	}
	for range 3 {
		join()
	}
	maxEpoch := map[int]uint64{}
	// settled is the round from which the live holders stay as they are
	// (they join at round 0); a change never moves it back
	settled := 1
	for round := 0; round < rounds; round++ {
		clock.advance(shardTTL / 3)
		var alive []string
		for id, s := range holders {
			if s.alive {
				alive = append(alive, id)
			} else if s.held != nil && !clock.t.Before(s.lastCall.Add(shardTTL)) {
				s.held = nil // its leases and heartbeat ran out now
				settled = max(settled, round)
			}
		}
		sort.Strings(alive)
		if round < rounds-10 { // the last rounds stay calm
			switch r := rng.IntN(10); {
			case r == 0 && len(alive) < 6:
				join()
				settled = max(settled, round+1)
			case r == 1 && len(alive) > 1:
				holders[alive[rng.IntN(len(alive))]].alive = false // dies
			case r == 2 && len(alive) > 1:
				id := alive[rng.IntN(len(alive))]
				if err := l.Release(ctx, id); err != nil {
					t.Fatal(err)
				}
				delete(holders, id)
				settled = max(settled, round)
			}
		}
		alive = alive[:0]
		for id, s := range holders {
			if s.alive {
				alive = append(alive, id)
			}
		}
		rng.Shuffle(len(alive), func(i, j int) { alive[i], alive[j] = alive[j], alive[i] })
		for _, id := range alive {
			s := holders[id]
			m := hold(t, l, id)
			for sh, e := range m {
				if old, ok := s.held[sh]; ok && old == e {
					continue
				}
				if e <= maxEpoch[sh] {
					t.Fatalf("round %d: %s took shard %d at epoch %d, an earlier lease had %d", round, id, sh, e, maxEpoch[sh])
				}
				maxEpoch[sh] = e
			}
			s.held, s.lastCall = m, clock.t
			running := map[string]map[int]uint64{}
			for hid, hs := range holders {
				if hs.held != nil && clock.t.Before(hs.lastCall.Add(shardTTL)) {
					running[hid] = hs.held
				}
			}
			checkHeld(t, l, running)
		}
		for id, s := range holders {
			for sh, e := range s.held {
				if e < maxEpoch[sh] && fenceOK(t, l, sh, e) {
					t.Fatalf("round %d: %s's epoch %d of shard %d passes the fence after a takeover at %d", round, id, e, sh, maxEpoch[sh])
				}
			}
		}
		dying := false // a holder that died keeps its shards until its leases run out
		for _, s := range holders {
			dying = dying || (!s.alive && s.held != nil)
		}
		if round >= settled+1 && !dying {
			total, lo, hi := 0, shards, 0
			for _, id := range alive {
				n := len(holders[id].held)
				total += n
				lo, hi = min(lo, n), max(hi, n)
			}
			if total != shards || hi-lo > 1 {
				t.Fatalf("round %d, live holders unchanged since round %d: %d shards held, shares %d..%d", round, settled, total, lo, hi)
			}
		}
	}
	if settled >= rounds-2 {
		t.Fatalf("the holders never settled (last change at round %d)", settled)
	}
}

// TestShardLeasesRedisComesBackOlder: the lease keys go back to an earlier
// state (a failover that lost writes, docs/ARCHITECTURE.md §6.7) while the
// fences, in other slots, keep theirs. A holder the old state names holder
// of shards taken over since finds their fences above its epochs: Hold
// gives them back and leaves them out, and the shards are taken again with
// epochs above every epoch handed out before, though the epoch counter
// went back too.
func TestShardLeasesRedisComesBackOlder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.Redis(t)
	clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
	l := newShardLeases(t, env.Client, env.Prefix, 16, clock)
	held := spread(t, l, clock, 2, "a", "b", "c")
	gk := redisq.NewKeys(redisq.GlobalPrefix(env.Prefix))
	keys := []string{gk.ShardHolders(), gk.ShardLeases(), gk.ShardEpochs(), gk.ShardCount()}
	snapshot := map[string]string{}
	for _, k := range keys {
		v, err := env.Client.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		snapshot[k] = v
	}
	ofC := held["c"]

	// c stops cleanly; a and b take its shards in the same millisecond
	if err := l.Release(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	taken, ofA := map[int]uint64{}, map[int]uint64{}
	for _, h := range []string{"a", "b"} {
		for s, e := range hold(t, l, h) {
			if _, ok := ofC[s]; ok {
				taken[s] = e
			}
			if h == "a" {
				ofA[s] = e
			}
		}
	}
	if len(taken) != len(ofC) {
		t.Fatalf("a and b took %v of c's %v", taken, ofC)
	}
	// a stops too, in the same millisecond: b's takes of c's shards from it
	// are takes again, with higher epochs
	if err := l.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for s, e := range hold(t, l, "b") {
		if old, ok := ofA[s]; ok && e <= old {
			t.Fatalf("b took shard %d at epoch %d in the millisecond a had it at %d", s, e, old)
		}
		if _, ok := ofC[s]; ok {
			taken[s] = e
		}
	}

	// the lease keys come back as they were before c's release
	for _, k := range keys {
		if err := env.Client.RestoreReplace(ctx, k, 0, snapshot[k]).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}
	clock.advance(shardTTL / 3)
	c := hold(t, l, "c")
	for s := range c {
		if _, ok := taken[s]; ok {
			t.Fatalf("c works on shard %d at its epoch from before the takeover", s)
		}
	}
	leases, err := l.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, le := range leases {
		if _, ok := taken[le.Shard]; ok && le.Holder == "c" {
			t.Fatalf("c kept its stale lease %+v", le)
		}
	}
	held = spread(t, l, clock, 2, "a", "b", "c")
	checkHeld(t, l, held)
	for _, m := range held {
		for s, e := range m {
			if old, ok := taken[s]; ok && e <= old {
				t.Fatalf("shard %d taken again at epoch %d, it had %d before Redis went back", s, e, old)
			}
		}
	}
}

// TestShardLeasesUnfencedShard: a shard whose fence cannot be written (here
// a key of the wrong type in its place; in production its primary
// unreachable) is left out of Hold's shards, with an error naming it, while
// the other shards are returned, and its lease is kept for the next Hold.
func TestShardLeasesUnfencedShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.Redis(t)
	clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
	l := newShardLeases(t, env.Client, env.Prefix, 4, clock)
	broken := l.ShardKeys(2).Fence()
	if err := env.Client.HSet(ctx, broken, "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	m, err := l.Hold(ctx, "a")
	if err == nil || !strings.Contains(err.Error(), "shard 2") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("hold with shard 2's fence unwritable: %v", err)
	}
	if _, ok := m[2]; ok || len(m) != 3 {
		t.Fatalf("hold returned %v, want shards 0, 1, 3", m)
	}
	if err := env.Client.Del(ctx, broken).Err(); err != nil {
		t.Fatal(err)
	}
	if m := hold(t, l, "a"); len(m) != 4 {
		t.Fatalf("hold returned %v once shard 2's fence could be written", m)
	}
}

// BenchmarkShardLeasesHold: one Hold of a holder among 4 over 16 shards,
// the shares settled (one lease script, then 4 fence scripts).
func BenchmarkShardLeasesHold(b *testing.B) {
	l, clock := setupShardLeases(b, 16)
	spread(b, l, clock, 2, "a", "b", "c", "d")
	b.ResetTimer()
	for range b.N {
		if m := hold(b, l, "a"); len(m) != 4 {
			b.Fatalf("a holds %v", m)
		}
	}
}
