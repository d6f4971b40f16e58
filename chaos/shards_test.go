package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The sharded rows run the installation on a Redis Cluster of three
// primaries, each with a replica, with its tenants spread over 16 logical
// shards (envOptions.RedisShards, docs/ARCHITECTURE.md §11.1): each
// shard's keys in a hash tag of its own, so that the shards with work sit
// on different primaries; the fetchers hold the shards under leases and
// admit from theirs at their grants of the global limit.

// shardCount is the number of logical shards of the sharded rows.
const shardCount = 16

// shardTenants is the number of tenants of T20 and T21: tenant-0…5 fall in
// six different shards, on all three primaries of a fresh cluster (shards
// 9, 5 and 0 on the third, 15 and 6 on the first, 3 on the second).
const shardTenants = 6

// workShards returns the shards that hold the tenants of w, each with its
// tenants, in shard order.
func workShards(w workload) (shards []int, tenants map[int][]string) {
	tenants = map[int][]string{}
	for t := 0; t < w.Tenants; t++ {
		name := fmt.Sprintf("tenant-%d", t)
		s := redisq.ShardOf(name, shardCount)
		tenants[s] = append(tenants[s], name)
	}
	return slices.Sorted(maps.Keys(tenants)), tenants
}

// shardSlot is the hash slot of shard i's keys and the node serving it.
func (e *env) shardSlot(ctx context.Context, i int) (slot, owner int, err error) {
	if slot, err = e.cluster.KeySlot(ctx, redisq.ShardPrefix(e.prefix, i)); err != nil {
		return 0, 0, err
	}
	owner, err = e.cluster.SlotOwner(ctx, slot)
	return slot, owner, err
}

// shardRun is the shape of T20 and T21: T18's http jobs (5 ms each,
// counted at a real endpoint) over six tenants in six shards, and fault
// once a third of them were called; fault describes what it did, and an
// error fails the row. With exactlyOnce every job must be called exactly
// once; without, a job called more than once is noted (a failover may lose
// a run's record: docs/ARCHITECTURE.md §6.7) and one never called fails.
func shardRun(t *testing.T, p profile, id string, jobs int, exactlyOnce bool,
	fault func(ctx context.Context, e *env, w workload, calls int) (string, error)) run {
	var faultErr error
	se := newSideEffects(t)
	tag := strings.ToLower(id)
	w := workload{Tenants: shardTenants, Groups: 2, Jobs: jobs / (2 * shardTenants), Job: se.job(tag, 5*time.Millisecond)}
	return run{
		id:           id,
		opts:         envOptions{RedisShards: shardCount, Settings: map[string]string{"HTTP_ALLOWED_HOSTS": "127.0.0.1", "LOG_LEVEL": "info"}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 10 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			for se.total() < w.total()/3 {
				if !sleepRand(ctx, 100*time.Millisecond, 200*time.Millisecond) {
					return "the run ended before the fault"
				}
			}
			desc, err := fault(ctx, e, w, se.total())
			faultErr = err
			<-ctx.Done()
			return desc
		},
		check: func(*env, *tally) []string {
			var out []string
			if faultErr != nil {
				out = append(out, "the fault failed: "+faultErr.Error())
			}
			never, twice, _, _ := se.count(tag, w)
			if never > 0 || (exactlyOnce && twice > 0) {
				out = append(out, se.check(tag, w)[1:]...)
			}
			return out
		},
		note: func() string { return strings.Join(append(se.check(tag, w), se.pauses()), "; ") },
	}
}

// t20: T18 on 16 shards: the primary holding the most shards with work is
// killed (SIGKILL) mid-run; its replica takes over, and the killed node
// comes back as the new primary's replica.
func t20(t *testing.T, p profile) run {
	return shardRun(t, p, "T20", p.t20Jobs, false, func(ctx context.Context, e *env, w workload, calls int) (string, error) {
		shards, _ := workShards(w)
		slots := map[int]int{}
		on := map[int][]int{} // primary → its shards with work
		for _, s := range shards {
			slot, owner, err := e.shardSlot(ctx, s)
			if err != nil {
				return "none", err
			}
			slots[s] = slot
			on[owner] = append(on[owner], s)
		}
		victim := -1
		for _, n := range slices.Sorted(maps.Keys(on)) {
			if victim < 0 || len(on[n]) > len(on[victim]) {
				victim = n
			}
		}
		gslot, _ := e.cluster.KeySlot(ctx, redisq.GlobalPrefix(e.prefix))
		gowner, _ := e.cluster.SlotOwner(ctx, gslot)
		spread := make([]string, 0, len(on))
		for _, n := range slices.Sorted(maps.Keys(on)) {
			spread = append(spread, fmt.Sprintf("n%d %v", n, on[n]))
		}
		global := "the cross-shard slot {g} on another primary"
		if gowner == victim {
			global = "the cross-shard slot {g} on it too"
		}
		killed := time.Now()
		e.cluster.Nodes[victim].Kill()
		replica := victim + 3
		for _, s := range on[victim] {
			for {
				if o, err := e.cluster.SlotOwnerSeenBy(ctx, slots[s], replica); err == nil && o == replica {
					break
				}
				if !sleepRand(ctx, 50*time.Millisecond, 100*time.Millisecond) {
					return fmt.Sprintf("primary n%d of shards %v killed at %d calls", victim, on[victim], calls),
						fmt.Errorf("its replica did not take over shard %d", s)
				}
			}
		}
		took := time.Since(killed)
		err := e.cluster.Nodes[victim].Start()
		return fmt.Sprintf("shards with work on the primaries: %s; n%d, holding %d of them (%s), killed (SIGKILL) at %d calls; its replica took over in %s; the old primary back as a replica",
			strings.Join(spread, ", "), victim, len(on[victim]), global, calls, took.Round(100*time.Millisecond)), err
	})
}

// t21: T19 on 16 shards: the slots of three shards with work (on
// different primaries where they can be) move each to the next primary at
// once, their keys 20 at a time with 2 ms between batches, so that several
// shards stay half moved together.
func t21(t *testing.T, p profile) run {
	return shardRun(t, p, "T21", p.t21Jobs, true, func(ctx context.Context, e *env, w workload, calls int) (string, error) {
		shards, _ := workShards(w)
		type move struct {
			shard, slot, from, to int
			took                  time.Duration
			err                   error
		}
		var moves []*move
		used := map[int]bool{}
		// first a shard per primary, then any, up to three
		for pass := 0; pass < 2 && len(moves) < 3; pass++ {
			for _, s := range shards {
				if len(moves) == 3 || slices.ContainsFunc(moves, func(m *move) bool { return m.shard == s }) {
					continue
				}
				slot, owner, err := e.shardSlot(ctx, s)
				if err != nil {
					return "none", err
				}
				if pass == 0 && used[owner] {
					continue
				}
				used[owner] = true
				moves = append(moves, &move{shard: s, slot: slot, from: owner, to: (owner + 1) % 3})
			}
		}
		var wg sync.WaitGroup
		for _, m := range moves {
			wg.Go(func() {
				start := time.Now()
				m.err = e.cluster.MigrateSlot(ctx, m.slot, m.to, 20, 2*time.Millisecond)
				m.took = time.Since(start)
			})
		}
		wg.Wait()
		var parts []string
		var errs []string
		for _, m := range moves {
			parts = append(parts, fmt.Sprintf("shard %d n%d→n%d in %s", m.shard, m.from, m.to, m.took.Round(100*time.Millisecond)))
			if m.err != nil {
				errs = append(errs, fmt.Sprintf("shard %d: %v", m.shard, m.err))
			}
		}
		desc := fmt.Sprintf("the slots of %d shards with work moved together from %d calls on, keys 20 at a time (%s)",
			len(moves), calls, strings.Join(parts, ", "))
		if len(errs) > 0 {
			return desc, fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return desc, nil
	})
}

// t22Limit is T22's GLOBAL_RPS: low enough that the run is rate-bound.
const t22Limit = 500

// t22: 16 shards over three fetchers, one of which is killed (SIGKILL)
// every 3–6 s and restarted 500 ms later, under a global limit the run is
// bound by. A killed fetcher's shards stay leased to it until its leases
// run out (15 s); the others and its successor (a holder of its own) then
// take them at higher epochs. Checks: exact counts, every job called
// exactly once, and no aligned 1 s window of first calls at the endpoint
// above GLOBAL_RPS (a job is called a little after it is admitted).
func t22(t *testing.T, p profile) run {
	se := newSideEffects(t)
	const tenants = 8 // eight different shards
	w := workload{Tenants: tenants, Groups: 2, Jobs: p.t22Jobs / (2 * tenants), Job: se.job("t22", 5*time.Millisecond)}
	var (
		watchStop context.CancelFunc
		watchDone sync.WaitGroup
		watch     leaseWatch
		ready     readyWatch
		admits    admitWatch
		notes     string
	)
	return run{
		id: "T22",
		opts: envOptions{RedisShards: shardCount, Fetchers: 3, Settings: map[string]string{
			"HTTP_ALLOWED_HOSTS": "127.0.0.1", "GLOBAL_RPS": fmt.Sprint(t22Limit), "LOG_LEVEL": "info"}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 10 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			wctx, cancel := context.WithCancel(context.Background())
			watchStop = cancel
			watchDone.Add(3)
			go func() { defer watchDone.Done(); watch.run(wctx, e) }()
			go func() { defer watchDone.Done(); admits.run(wctx, e) }()
			go func() { defer watchDone.Done(); ready.run(wctx, e) }()
			fetchers := e.services("fetcher-")
			per := map[string]int{}
			n := 0
			// Kills stop once nine jobs in ten were called: each kill holds
			// its fetcher's shards for a lease time, and the row's end
			// should not wait for the last kills' leases alone.
			for se.total() < w.total()*9/10 && sleepRand(ctx, 3*time.Second, 6*time.Second) {
				s := fetchers[rand.IntN(len(fetchers))]
				if s.kill9() {
					n++
					per[s.name]++
				}
			}
			<-ctx.Done()
			return fmt.Sprintf("%d× kill -9 of a fetcher (%s), 3 fetchers, GLOBAL_RPS %d", n, fmtCounts(per), t22Limit)
		},
		check: func(e *env, _ *tally) []string {
			if watchStop != nil {
				watchStop()
				watchDone.Wait()
			}
			var out []string
			if never, twice, _, _ := se.count("t22", w); never > 0 || twice > 0 {
				out = append(out, se.check("t22", w)[1:]...)
			}
			if watch.err != nil {
				out = append(out, "shard leases: "+watch.err.Error())
			}
			// The limit is checked on the admissions themselves, as the
			// shards' scripts counted them by Redis's clock. The READY
			// publishes and the calls at the endpoint follow them by a
			// varying delay (and READY carries re-publishes), so their
			// aligned seconds are noted, not checked.
			amost, aat, atotal := admits.most()
			if admits.err != nil {
				out = append(out, "admissions watch: "+admits.err.Error())
			}
			if amost > t22Limit {
				out = append(out, fmt.Sprintf("global limit exceeded: %d jobs admitted in the aligned second %s (GLOBAL_RPS %d)",
					amost, aat.UTC().Format("15:04:05"), t22Limit))
			}
			if atotal < int64(w.total()) {
				out = append(out, fmt.Sprintf("admissions watch: %d admissions counted for %d jobs (a window's count expired unread)", atotal, w.total()))
			}
			if ready.err != nil {
				out = append(out, "READY watch: "+ready.err.Error())
			}
			rmost, _ := ready.most()
			cfirst, call := se.mostCalls()
			series, full := admits.perSecond(t22Limit)
			notes = fmt.Sprintf("admitted per aligned second: most %d (GLOBAL_RPS %d), %d of %d seconds at 95%% of the limit or more, %d admissions counted, per second %v; "+
				"most in an aligned second of jobs published on READY %d, of first calls at the endpoint %d (of calls %d); %s; %s",
				amost, t22Limit, full, len(series), atotal, series, rmost, cfirst, call, watch.String(), e.takeovers())
			return out
		},
		note: func() string { return se.check("t22", w)[0] + "; " + notes },
	}
}

// pauses describes the endpoint's calls over time: from the first to the
// last, and the longest pause between two calls (a stall of the pipeline),
// when it started after the first call.
func (s *sideEffects) pauses() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.at) < 2 {
		return "fewer than 2 calls"
	}
	var gap time.Duration
	var gapAt time.Time
	for i := 1; i < len(s.at); i++ {
		if d := s.at[i].at.Sub(s.at[i-1].at); d > gap {
			gap, gapAt = d, s.at[i-1].at
		}
	}
	first := s.at[0].at
	return fmt.Sprintf("calls over %s, the longest pause %s from %s after the first call",
		s.at[len(s.at)-1].at.Sub(first).Round(100*time.Millisecond), gap.Round(100*time.Millisecond), gapAt.Sub(first).Round(100*time.Millisecond))
}

// mostCalls is the most first calls of jobs (and the most calls) at the
// endpoint in an aligned second.
func (s *sideEffects) mostCalls() (first, all int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	firsts, alls := map[int64]int{}, map[int64]int{}
	for _, c := range s.at {
		sec := c.at.Unix()
		alls[sec]++
		if !seen[c.path] {
			seen[c.path] = true
			firsts[sec]++
		}
	}
	for _, n := range firsts {
		first = max(first, n)
	}
	for _, n := range alls {
		all = max(all, n)
	}
	return first, all
}

// readyWatch counts the jobs published on READY per aligned second (a
// pack's job count is in its subject): what the fetchers admitted, plus
// any job published again (a dispatcher re-publishes a job whose
// admission lease ran out before it was claimed).
type readyWatch struct {
	mu     sync.Mutex
	perSec map[int64]int
	err    error
}

func (r *readyWatch) run(ctx context.Context, e *env) {
	r.perSec = map[int64]int{}
	sub, err := e.nc.Subscribe(e.names.ReadyAll(), func(m *nats.Msg) {
		now := time.Now()
		_, n, ok := e.names.ReadyFromSubject(m.Subject)
		if !ok {
			n = 1
		}
		r.mu.Lock()
		r.perSec[now.Unix()] += n
		r.mu.Unlock()
	})
	if err != nil {
		r.err = err
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// most is the most jobs published on READY in an aligned second, and
// that second.
func (r *readyWatch) most() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	most, at := 0, int64(0)
	for sec, n := range r.perSec {
		if n > most {
			most, at = n, sec
		}
	}
	return most, time.Unix(at, 0)
}

// admitWatch reads every shard's count of the jobs its admissions took in
// each aligned window of the global limit (admit.lua's
// P{s<i>}:rate-limit:global:<window>, incremented in the script that
// leases the jobs, by Redis's clock, and kept two windows) every 200 ms,
// and keeps the last value read of each: summed over the shards, the jobs
// admitted in each aligned second, exactly.
type admitWatch struct {
	counts map[int64]map[int]int64 // window → shard → jobs
	err    error
}

func (a *admitWatch) run(ctx context.Context, e *env) {
	a.counts = map[int64]map[int]int64{}
	for ctx.Err() == nil {
		w := time.Now().UnixMilli() / 1000
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pl := e.rdb.Pipeline()
		type read struct {
			w     int64
			shard int
			cmd   *redis.StringCmd
		}
		var reads []read
		for i := 0; i < e.shards; i++ {
			k := redisq.NewKeys(redisq.ShardPrefix(e.prefix, i))
			for _, ww := range []int64{w - 1, w, w + 1} {
				reads = append(reads, read{ww, i, pl.Get(rctx, k.RateLimitGlobal(ww))})
			}
		}
		_, err := pl.Exec(rctx)
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			a.err = err
		}
		for _, r := range reads {
			if n, err := r.cmd.Int64(); err == nil {
				if a.counts[r.w] == nil {
					a.counts[r.w] = map[int]int64{}
				}
				a.counts[r.w][r.shard] = max(a.counts[r.w][r.shard], n)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// most is the most jobs admitted in an aligned second, that second, and
// the jobs admitted in all.
func (a *admitWatch) most() (most int64, at time.Time, total int64) {
	for w, shards := range a.counts {
		var n int64
		for _, c := range shards {
			n += c
		}
		total += n
		if n > most {
			most, at = n, time.Unix(w, 0)
		}
	}
	return most, at, total
}

// perSecond lists the jobs admitted in each aligned second from the first
// with admissions to the last, and counts the seconds at 95 % of limit or
// more.
func (a *admitWatch) perSecond(limit int64) (series []int64, full int) {
	var ws []int64
	for w := range a.counts {
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return nil, 0
	}
	slices.Sort(ws)
	for w := ws[0]; w <= ws[len(ws)-1]; w++ {
		var n int64
		for _, c := range a.counts[w] {
			n += c
		}
		series = append(series, n)
		if n*100 >= limit*95 {
			full++
		}
	}
	return series, full
}

// leaseWatch reads the shard leases every 100 ms and counts the times a
// shard changed hands (its lease found with another holder than the last
// time it was read) and the takes (another epoch: a change of hands, or a
// holder taking back a shard it had given back or let run out).
type leaseWatch struct {
	changes, takes, reads int
	holders               map[string]bool
	err                   error
	last                  map[int]redisq.ShardLease
}

func (l *leaseWatch) run(ctx context.Context, e *env) {
	leases, err := redisq.NewShardLeases(ctx, e.rdb, redisq.ShardLeasesConfig{Prefix: e.prefix, Shards: e.shards})
	if err != nil {
		l.err = err
		return
	}
	l.holders, l.last = map[string]bool{}, map[int]redisq.ShardLease{}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ls, err := leases.Leases(rctx)
		cancel()
		if err == nil {
			l.reads++
			for _, x := range ls {
				l.holders[x.Holder] = true
				if prev, ok := l.last[x.Shard]; ok {
					if prev.Holder != x.Holder {
						l.changes++
					}
					if prev.Epoch != x.Epoch {
						l.takes++
					}
				}
				l.last[x.Shard] = x
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *leaseWatch) String() string {
	return fmt.Sprintf("shards changed hands %d times, %d takes at a new epoch (leases read %d times, %d holders seen)", l.changes, l.takes, l.reads, len(l.holders))
}

// takeovers counts the fetchers' log lines saying a shard was taken over
// by another fetcher: an admission refused by the shard's fence.
func (e *env) takeovers() string {
	n := 0
	for _, s := range e.services("fetcher-") {
		b, err := os.ReadFile(s.log)
		if err != nil {
			continue
		}
		n += strings.Count(string(b), "shard taken over by another fetcher")
	}
	return fmt.Sprintf("%d admissions refused by a shard's fence (fetcher logs)", n)
}
