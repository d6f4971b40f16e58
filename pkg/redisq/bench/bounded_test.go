package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// Sizes of BenchmarkRedisqBoundedScripts: the non-ready (backoff) queue
// holds boundedBackoff jobs, half of them of one group (the one cancelled).
const (
	boundedBackoff   = 1_000_000
	boundedBigGroup  = 500_000
	boundedOthers    = 50  // other groups sharing the rest, over boundedTenants tenants
	boundedTenants   = 10  // tenants of the other groups
	boundedQueued    = 200 // queued jobs per group (admission has work)
	boundedCalls     = 200 // timed release and admit calls
	boundedFillBatch = 5000
	// boundedGoalMs is the longest script call allowed (the reliability goal).
	boundedGoalMs = 50
	// slowlogFromUs: SLOWLOG keeps the commands that took at least this (µs).
	slowlogFromUs = "500"
)

// scriptTimes keeps the longest call of each script, as the client sees it
// (server time plus one round trip on localhost).
type scriptTimes struct {
	mu    sync.Mutex
	max   map[string]time.Duration
	calls map[string]int
}

func (s *scriptTimes) ObserveLua(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max[name] = max(s.max[name], d)
	s.calls[name]++
}

func (s *scriptTimes) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max, s.calls = map[string]time.Duration{}, map[string]int{}
}

// slowest is the longest script call SLOWLOG recorded since the last reset
// (slowlog-log-slower-than is slowlogFromUs: the calls that matter are
// logged with their server time; Redis 7 also logs the commands scripts
// run, so a threshold of 0 would fill the log with them).
func (s *server) slowest(b *testing.B) time.Duration {
	b.Helper()
	ctx := context.Background()
	entries, err := s.rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	var longest time.Duration
	for _, e := range entries {
		if len(e.Args) > 0 && (strings.EqualFold(e.Args[0], "evalsha") || strings.EqualFold(e.Args[0], "eval")) {
			longest = max(longest, e.Duration)
		}
	}
	return longest
}

// latencyMax is the longest stall (ms) Redis's latency monitor recorded for
// event since the last LATENCY RESET (0 when none passed its threshold).
func (s *server) latencyMax(b *testing.B, event string) float64 {
	b.Helper()
	rows, err := s.rdb.Do(context.Background(), "LATENCY", "LATEST").Slice()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rows {
		if f, ok := r.([]any); ok && len(f) >= 4 && f[0] == event {
			if v, ok := f[3].(int64); ok {
				return float64(v)
			}
		}
	}
	return 0
}

func (s *server) resetSlowlog(b *testing.B) {
	b.Helper()
	if err := s.rdb.Do(context.Background(), "SLOWLOG", "RESET").Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRedisqBoundedScripts fills the non-ready queue with 1,000,000
// backed-off jobs (500,000 of one group, the rest over 50 groups of 10
// tenants) and reports the longest single script call of release, admit,
// the counter correction, the cancel of the 500,000-job group and then of
// the 50 others: each must stay under 50 ms, whatever the size of the
// queue. The figures are the server's time per call from SLOWLOG (…_max_ms)
// and the client's (…_client_max_ms, one localhost round trip more). Both
// are wall time: …_fast_command_stall_max_ms is the longest O(1) command
// (Redis's latency monitor, "fast-command") in the same phase, the stalls
// the machine imposes on any command whatever its work.
func BenchmarkRedisqBoundedScripts(b *testing.B) {
	if !*figures {
		b.Skip("fills 1,000,000 backed-off jobs (about a minute): run with -figures (make bench-redisq)")
	}
	b.StopTimer()
	// AOF as the operations guide asks (always, as in the chaos suite): a
	// rewrite forks Redis while the scripts run, and the pages they write
	// are copied (redisq.Config.ScriptTimeBudget).
	s := startServer(b, "slowlog-max-len", "100000", "appendonly", "yes", "appendfsync", "always")
	times := &scriptTimes{}
	times.reset()
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, Observer: times})
	ctx := context.Background()
	big := groupRef(0)
	others := make([]contracts.GroupRef, boundedOthers)
	for i := range others {
		others[i] = contracts.GroupRef{Tenant: fmt.Sprintf("tenant-%d", 1+i%boundedTenants), ID: groupID(1 + i)}
	}
	all := append([]contracts.GroupRef{big}, others...)
	// Every group gets queued jobs the normal way, and starts.
	var jobs []redisq.Job
	for _, g := range all {
		for i := 0; i < boundedQueued; i++ {
			jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("q-%06d", i), Type: "send-promotion", Payload: payload(i)})
		}
	}
	enqueueAll(b, q, jobs)
	if err := q.WatchGroups(ctx, all...); err != nil {
		b.Fatal(err)
	}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	fillBackoff(b, s.rdb, keysOf(q), big, boundedBigGroup, now)
	per := (boundedBackoff - boundedBigGroup) / boundedOthers
	for _, g := range others {
		fillBackoff(b, s.rdb, keysOf(q), g, per, now)
	}
	if n, err := s.rdb.ZCard(ctx, keysOf(q).NonReadyQueue()).Result(); err != nil || n != boundedBackoff {
		b.Fatalf("non-ready queue holds %d jobs (%v), want %d", n, err, boundedBackoff)
	}
	if err := s.rdb.ConfigSet(ctx, "slowlog-log-slower-than", slowlogFromUs).Err(); err != nil {
		b.Fatal(err)
	}
	if err := s.rdb.ConfigSet(ctx, "latency-monitor-threshold", "1").Err(); err != nil {
		b.Fatal(err)
	}

	// measure times fn, whose calls are of the script of the same name
	// (a name "<script>_<phase>" times that script's calls in a phase).
	measure := func(name string, fn func()) {
		script, _, _ := strings.Cut(name, "_")
		times.reset()
		s.resetSlowlog(b)
		if err := s.rdb.Do(ctx, "LATENCY", "RESET").Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		fn()
		wall := time.Since(start)
		b.StopTimer()
		server := s.slowest(b)
		times.mu.Lock()
		client, calls := times.max[script], times.calls[script]
		times.mu.Unlock()
		figure(name+"_max_ms", msOf(server))
		figure(name+"_client_max_ms", msOf(client))
		figure(name+"_calls", float64(calls))
		figure(name+"_total_ms", msOf(wall))
		figure(name+"_fast_command_stall_max_ms", s.latencyMax(b, "fast-command"))
		if msOf(server) > boundedGoalMs {
			b.Errorf("%s: longest call %.1f ms at %d backed-off jobs, goal < %d ms", name, msOf(server), boundedBackoff, boundedGoalMs)
		}
	}

	measure("correct", func() {
		if _, err := q.CorrectCounters(ctx); err != nil {
			b.Fatal(err)
		}
	})
	measure("admit", func() {
		for i := 0; i < boundedCalls; i++ {
			if _, err := q.Admit(ctx, 256); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Release with the clock 5 minutes on: every backed-off job is due.
	later := q.Config()
	later.Observer = times
	later.GlobalLimit = ungated // every call moves a full batch
	later.Clock = func() time.Time { return time.Now().Add(5 * time.Minute) }
	rq, err := redisq.New(ctx, s.rdb, later)
	if err != nil {
		b.Fatal(err)
	}
	measure("release", func() {
		for i := 0; i < boundedCalls; i++ {
			if _, err := rq.Release(ctx, 500); err != nil {
				b.Fatal(err)
			}
		}
	})
	left, err := s.rdb.ZCard(ctx, keysOf(q).NonReadyQueue()).Result()
	if err != nil {
		b.Fatal(err)
	}
	var res *redisq.CancelResult
	measure("cancel", func() {
		if res, err = q.Cancel(ctx, big); err != nil {
			b.Fatal(err)
		}
	})
	figure("cancel_dropped", float64(res.Dropped))
	after, err := s.rdb.ZCard(ctx, keysOf(q).NonReadyQueue()).Result()
	if err != nil {
		b.Fatal(err)
	}
	if res.Outcome != redisq.Cancelled || res.Group.Cancelled != res.Dropped || after >= left {
		b.Fatalf("cancel: %+v; non-ready queue %d -> %d", res, left, after)
	}
	figure("backoff_jobs_at_cancel", float64(left))
	// Then every other group, one after the other, as an operator who
	// cancels a tenant's bulk actions would (chaos T8's last phase).
	measure("cancel_others", func() {
		for _, g := range others {
			if res, err = q.Cancel(ctx, g); err != nil {
				b.Fatal(err)
			}
			if res.Outcome != redisq.Cancelled || res.Group.State != contracts.StateCancelled {
				b.Fatalf("cancel %s: %+v", g, res)
			}
		}
	})
}

// fillBackoff writes n backed-off jobs of g directly (as retry.lua leaves
// them: job hash BACKOFF, id in the group's ids, member of the non-ready
// queue due within the next two minutes) and adds them to the group's and
// tenant's counters: the benchmark needs the state, not the path to it.
func fillBackoff(b *testing.B, rdb *redis.Client, k redisq.Keys, g contracts.GroupRef, n int, now time.Time) {
	b.Helper()
	ctx := context.Background()
	gk := g.Tenant + ":" + g.ID
	for start := 0; start < n; start += boundedFillBatch {
		end := min(start+boundedFillBatch, n)
		ids := make([]any, 0, end-start)
		zs := make([]redis.Z, 0, end-start)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < end; i++ {
				jid := fmt.Sprintf("b-%07d", i)
				p.HSet(ctx, k.Job(g, jid), "type", "send-promotion", "payload", `{"target":"user"}`,
					"status", "BACKOFF", "attempt", 1)
				ids = append(ids, jid)
				zs = append(zs, redis.Z{Score: float64(now.UnixMilli() + int64(i%120_000)), Member: gk + ":" + jid})
			}
			p.SAdd(ctx, k.GroupIDs(g), ids...)
			p.ZAdd(ctx, k.NonReadyQueue(), zs...)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k.GroupMeta(g), "totalJobs", int64(n))
		p.HSet(ctx, k.GroupMeta(g), "status", "RUNNING")
		p.IncrBy(ctx, k.CongestionCount(g), int64(n))
		p.IncrBy(ctx, k.TenantNonReady(g.Tenant), int64(n))
		p.IncrBy(ctx, k.TenantQueuedJobs(g.Tenant), int64(n))
		p.HSet(ctx, k.CongestionStats(g), "currentNonReadyCount", n)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
